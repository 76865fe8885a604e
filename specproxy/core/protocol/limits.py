"""The proxy's limits on what a peer may send, defined once for every path.

The proxy's server (``proxy.lean``, ``proxy.intake``) and its upstream client
(``backends.h1``) read them from here. The head limits are aiohttp's defaults (its client
keeps them for the one-shot info reads); a request head over them is refused with 400
and the connection closed.
"""

from __future__ import annotations

MAX_LINE_BYTES = 8190
"""The request line (or status line) without its CRLF."""

MAX_FIELD_BYTES = 8190
"""A header's name, and separately its value."""

MAX_HEADERS = 128
"""Header lines in one head (request or response; trailers count with the headers)."""

MAX_HEAD_BYTES = MAX_LINE_BYTES + MAX_HEADERS * (2 * MAX_FIELD_BYTES + 4) + 2
"""What the three limits above allow one head to hold at most (about 2 MiB)."""

MAX_RESPONSE_HEAD_BYTES = 64 * 1024
"""An upstream's response head (status line and headers), each answer, interim ones too."""

MAX_INTERIM = 8
"""Interim (1xx) answers before the final one; more fail the exchange as ``protocol``."""

MAX_PIPELINED_BYTES = 256 * 1024
"""Bytes a client may pipeline behind a request in flight before the proxy stops reading
the connection (it reads on once the answer has ended)."""
