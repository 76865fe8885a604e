"""Reports built from saved records only (depends on core, config and errors)."""
