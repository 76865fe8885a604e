"""The comparison of the two sides: pairing and ratios (``pairing``), per-side figures
(``sides``), acceptance, output agreement, failures, launch checks, the recommendation's
conditions and the verdict; ``column_figures``/``column_acceptance`` compute the same
figures over the report's record columns. Pure: no I/O."""
