"""Record-by-record definitions of report figures: oracles for the column pass."""
