"""Development and test tooling; not part of the installed specproxy package."""
