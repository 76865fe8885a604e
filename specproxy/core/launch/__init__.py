"""Launch facts: a server's launch configuration, where its command came from, and diffs."""
