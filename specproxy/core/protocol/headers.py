"""The HTTP header names the proxy and the replayer share: one declaration each.

Pure constants (and the one check of a category value) (lower case, as aiohttp compares them case-insensitively). The proxy sets
``SIDE_HEADER`` and ``REQUEST_ID_HEADER`` on every response and honours ``SIDE_HEADER``,
``WARMUP_HEADER`` and ``CATEGORY_HEADER`` on requests (none reaches an upstream server);
the replayer reads ``SIDE_HEADER`` back and, ``--via`` a proxy, sends ``WARMUP_HEADER``
for warm-up requests and ``CATEGORY_HEADER`` for requests whose prompt has a category.
"""

from __future__ import annotations

SIDE_HEADER = "x-specproxy-side"
"""Request: force a side (``baseline`` or ``candidate``). Response: the side that answered."""
WARMUP_HEADER = "x-specproxy-warmup"
"""Request: ``1`` marks a warm-up request: recorded, counted apart, left out of every figure."""
REQUEST_ID_HEADER = "x-specproxy-request-id"
"""Response: the ``request_id`` of the record written for this answer."""
CATEGORY_HEADER = "x-specproxy-category"
"""Request: the prompt's category (e.g. MT-Bench's ``writing``), kept in the records."""
CATEGORY_MAX_CHARS = 64
"""The longest category the proxy accepts (printable ASCII)."""


def parse_category(value: str) -> str | None:
    """A prompt category as ``CATEGORY_HEADER`` carries it, stripped; None when it is empty,
    longer than ``CATEGORY_MAX_CHARS`` or not printable ASCII (so no control characters or
    other text reach a header or a record)."""
    value = value.strip()
    ok = 0 < len(value) <= CATEGORY_MAX_CHARS and value.isascii() and value.isprintable()
    return value if ok else None
