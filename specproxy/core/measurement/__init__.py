"""Per request and per window: the fold of a response, timing, acceptance, histograms."""
