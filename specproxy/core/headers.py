"""The HTTP header names the proxy and the replayer share: one declaration each.

Pure constants (lower case, as aiohttp compares them case-insensitively). The proxy sets
``SIDE_HEADER`` and ``REQUEST_ID_HEADER`` on every response and honours ``SIDE_HEADER``
and ``WARMUP_HEADER`` on requests (neither reaches an upstream server); the replayer
reads ``SIDE_HEADER`` back and sends ``WARMUP_HEADER`` for warm-up requests ``--via`` a
proxy.
"""

from __future__ import annotations

SIDE_HEADER = "x-specproxy-side"
"""Request: force a side (``baseline`` or ``candidate``). Response: the side that answered."""
WARMUP_HEADER = "x-specproxy-warmup"
"""Request: ``1`` marks a warm-up request: recorded, counted apart, left out of every figure."""
REQUEST_ID_HEADER = "x-specproxy-request-id"
"""Response: the ``request_id`` of the record written for this answer."""
