"""What servers say: SSE, each route's events and bodies, headers, limits, URLs, versions."""
