"""Records and what is kept of them: the value types, the report's columns, per-side tallies."""
