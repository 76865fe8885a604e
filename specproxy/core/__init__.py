"""The pure core: no I/O, no clocks, no event loop. Grouped by concept: ``protocol``,
``measurement``, ``records``, ``statistics``, ``load``, ``launch`` and ``compare``."""
