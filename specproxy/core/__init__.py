"""The pure core: parsers, timing, statistics and decisions. No I/O, no clocks, no event loop."""
