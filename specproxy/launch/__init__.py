"""Starting a matched SGLang pair (baseline and candidate) on one GPU host."""
