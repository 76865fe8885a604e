"""The HTTP header names the proxy and the replayer share, and what the proxy reads from them.

Pure. The names are lower case (compared case-insensitively). The proxy sets
``SIDE_HEADER`` and ``REQUEST_ID_HEADER`` on every response and honours ``SIDE_HEADER``,
``WARMUP_HEADER`` and ``CATEGORY_HEADER`` on requests (none reaches an upstream server);
the replayer reads ``SIDE_HEADER`` back and, ``--via`` a proxy, sends ``WARMUP_HEADER``
for warm-up requests and ``CATEGORY_HEADER`` for requests whose prompt has a category.

``header_facts`` is what the proxy reads from a relayed request's headers (the forced
side, the category, warm-up, the sticky key) and the headers it sends upstream
(``upstream_headers``, the one filter): the client's Authorization goes upstream unchanged
unless the proxy checks its own key (``keep_auth`` False) or a per-side upstream key
replaces it; framing and hop headers and the proxy's own never go.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from specproxy.core.records.model import Role

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


FRAMING_HEADERS = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "te", "upgrade"}
)
"""Headers about one connection or one body's framing (lower case): never relayed in either
direction, because aiohttp writes its own."""


class SharedHeaders(dict[str, str]):
    """Upstream headers that many requests share, never changed once made (the proxy's,
    for a request head it has seen before): a backend may keep what it derives from them
    in ``derived`` (under a key of its own), and it lives as long as they do."""

    __slots__ = ("derived",)

    def __init__(self, headers: Mapping[str, str]) -> None:
        super().__init__(headers)
        self.derived: dict[object, bytes] = {}


_NOT_FORWARDED = FRAMING_HEADERS | {
    "host",
    "accept-encoding",
    "content-encoding",  # the server has decoded the request body
    "proxy-authorization",
    "expect",  # met by the server (100 Continue); the body goes upstream whole
    SIDE_HEADER,
    WARMUP_HEADER,
    CATEGORY_HEADER,
}
_CANONICAL = {"authorization": "Authorization", "content-type": "Content-Type"}


def upstream_headers(headers: Mapping[str, str], *, keep_auth: bool) -> dict[str, str]:
    """The client's headers to send upstream (framing, our own and maybe auth removed): the
    only place they are filtered, as a backend sends an UpstreamRequest's headers as given."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower in _NOT_FORWARDED or (lower == "authorization" and not keep_auth):
            continue
        out[_CANONICAL.get(lower, name)] = value
    return out


@dataclass(frozen=True, slots=True)
class HeaderFacts:
    """What ``plan`` reads from a request's headers: a function of the headers alone, so
    kept for a request head seen before (``upstream`` then ``SharedHeaders``, read only)."""

    forced: Role | None  # x-specproxy-side
    category: str | None  # x-specproxy-category
    warmup: bool  # x-specproxy-warmup
    sticky: str | None  # the sticky header's value, when one is configured
    upstream: dict[str, str]  # the headers to send upstream (``upstream_headers``)


class HeaderProblem(NamedTuple):
    """Why a request's headers cannot be used (the proxy answers it as a 400)."""

    message: str
    code: str
    param: str


def header_facts(
    headers: Mapping[str, str],
    *,
    keep_auth: bool,
    sticky_header: str | None,
    shared: bool = False,
) -> HeaderFacts | HeaderProblem:
    """``headers`` read for the proxy's planning, or why they cannot be used. ``keep_auth``:
    the client's Authorization goes upstream (no proxy key checks it); ``shared``: for many
    requests (a known head), so the upstream headers are ``SharedHeaders``."""
    try:
        forced = parse_forced_side(headers.get(SIDE_HEADER))
    except ValueError as exc:
        return HeaderProblem(str(exc), "invalid_side_header", SIDE_HEADER)
    category = headers.get(CATEGORY_HEADER)
    if category is not None and (category := parse_category(category)) is None:
        message = f"{CATEGORY_HEADER} must be 1 to {CATEGORY_MAX_CHARS} printable ASCII characters"
        return HeaderProblem(message, "invalid_category_header", CATEGORY_HEADER)
    upstream = upstream_headers(headers, keep_auth=keep_auth)
    return HeaderFacts(
        forced,
        category,
        headers.get(WARMUP_HEADER, "").strip() in {"1", "true"},
        None if sticky_header is None else headers.get(sticky_header),
        SharedHeaders(upstream) if shared else upstream,
    )


def parse_forced_side(value: str | None) -> Role | None:
    """The side named by the ``x-specproxy-side`` header; ValueError naming bad values."""
    if value is None:
        return None
    try:
        return Role(value.strip().lower())
    except ValueError:
        raise ValueError(
            f"header {SIDE_HEADER} must be 'baseline' or 'candidate', got {value!r}"
        ) from None
