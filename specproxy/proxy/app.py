"""A relayed request, planned: its headers read, its body parsed, its sides decided.

The generation routes (``RELAYED``: the three ``POST`` routes; ``PUT /generate`` too, as
SGLang accepts it) are relayed by the server (``proxy.lean``): ``header_facts`` reads the
request's headers, ``plan`` parses its body and decides its sides (``policy``, ``shaping``),
``proxied_request`` makes the rest of its ``ProxiedRequest``. The proxy's other routes
are ``proxy.routes``.

Auth: with ``api_key`` set, the client's Authorization (checked by the server) is not
sent upstream. Without it, the client's Authorization goes upstream unchanged unless a
per-side upstream key is configured. Prompt text, output text and keys never reach a log
line from here. The request headers
``x-specproxy-side``, ``x-specproxy-warmup`` and ``x-specproxy-category`` (``core.protocol.headers``)
are read here and never sent upstream.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from specproxy.backends.base import (
    FRAMING_HEADERS,
    EventFilter,
    SharedHeaders,
    UpstreamRequest,
)
from specproxy.core.protocol.headers import (
    CATEGORY_HEADER,
    CATEGORY_MAX_CHARS,
    SIDE_HEADER,
    WARMUP_HEADER,
    parse_category,
)
from specproxy.core.records.model import Role, Route
from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.messages import Response, bad_request
from specproxy.proxy.policy import Decision, ProxiedRequest, parse_forced_side, sticky_user
from specproxy.proxy.shaping import BadRequest, is_streaming, parse_body, plan_upstream
from specproxy.proxy.state import ProxyState

RELAYED: dict[tuple[str, str], Route] = {("POST", r.value): r for r in Route}
RELAYED[("PUT", Route.GENERATE.value)] = Route.GENERATE
"""(method, path) of each relayed generation route (``proxy.intake``, ``proxy.routes``)."""
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
    """The client's headers to send upstream (framing, our own and maybe auth removed).

    The only place they are filtered: the backend sends an UpstreamRequest's headers as given.
    """
    out: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower in _NOT_FORWARDED or (lower == "authorization" and not keep_auth):
            continue
        out[_CANONICAL.get(lower, name)] = value
    return out


class RequestIds:
    """Request ids: 16 hex digits, a random prefix drawn once per process and a counter.

    Unique within a run (each worker of ``serve --workers N`` draws its own prefix; a
    forked child draws anew), without a system call per request as ``secrets.token_hex``
    makes; after 2**32 ids a new prefix is drawn."""

    __slots__ = ("_next", "_prefix")

    def __init__(self) -> None:
        self._prefix = ""
        self._next = 1 << 32
        os.register_at_fork(after_in_child=self.reset)

    def reset(self) -> None:
        """Draw the next id from a new prefix."""
        self._next = 1 << 32

    def __call__(self) -> str:
        n = self._next
        if n >= 1 << 32:
            self._prefix = secrets.token_hex(4)
            n = 0
        self._next = n + 1
        return f"{self._prefix}{n:08x}"


_request_ids = RequestIds()


@dataclass(frozen=True, slots=True)
class HeaderFacts:
    """What ``plan`` reads from a request's headers: a function of the headers alone, so
    ``proxy.lean`` keeps it for a request head it has seen before (``upstream`` is then
    ``SharedHeaders``, shared by those requests and read only)."""

    forced: Role | None  # x-specproxy-side
    category: str | None  # x-specproxy-category
    warmup: bool  # x-specproxy-warmup
    sticky: str | None  # the sticky header's value, when one is configured
    upstream: dict[str, str]  # the headers to send upstream (``upstream_headers``)


def header_facts(
    cfg: ProxyConfig, headers: Mapping[str, str], *, shared: bool = False
) -> HeaderFacts | Response:
    """``headers`` read for ``plan``; an error response when they cannot be used.

    ``shared``: the facts will serve many requests (``proxy.lean``'s known heads), so the
    upstream headers are ``SharedHeaders``, whose upstream head a backend keeps."""
    try:
        forced = parse_forced_side(headers.get(SIDE_HEADER))
    except ValueError as exc:
        return bad_request(str(exc), code="invalid_side_header", param=SIDE_HEADER)
    category = headers.get(CATEGORY_HEADER)
    if category is not None and (category := parse_category(category)) is None:
        message = f"{CATEGORY_HEADER} must be 1 to {CATEGORY_MAX_CHARS} printable ASCII characters"
        return bad_request(message, code="invalid_category_header", param=CATEGORY_HEADER)
    keep_auth = cfg.api_key is None
    return HeaderFacts(
        forced,
        category,
        headers.get(WARMUP_HEADER, "").strip() in {"1", "true"},
        None if cfg.sticky_header is None else headers.get(cfg.sticky_header),
        (SharedHeaders if shared else dict)(upstream_headers(headers, keep_auth=keep_auth)),
    )


class Planned(NamedTuple):
    """A request ``plan`` has decided: what its upstream request needs, and the rest of
    its ``ProxiedRequest`` (made by ``proxied_request``)."""

    obj: dict[str, Any]  # the client's body, parsed
    decision: Decision
    upstream: UpstreamRequest
    drop_event: EventFilter | None
    facts: HeaderFacts
    arrived_us: int


def plan(
    state: ProxyState,
    route: Route,
    facts: HeaderFacts | Response,
    raw: bytes,
    arrived_us: int,
) -> Planned | Response:
    """Parse a whole request body and decide its sides; an error response when it cannot be used.

    ``facts``: ``header_facts`` of the request's headers (their error response, if any, is
    returned after the body's: a body that cannot be used is named first)."""
    cfg = state.config
    try:
        obj = parse_body(raw)
        stream = is_streaming(obj)
    except BadRequest as exc:
        return bad_request(str(exc), code="invalid_body")
    if isinstance(facts, Response):
        return facts
    sticky = sticky_user(obj) if cfg.sticky_user else facts.sticky
    assert state.policy is not None
    decision = state.policy.decide(forced=facts.forced, sticky=sticky)
    if decision.primary not in state.backends:
        return bad_request(
            f"no {decision.primary} server is configured", code="side_not_configured"
        )
    allowed = state.allowed_injection(decision.primary, decision.shadow)
    body = plan_upstream(route, raw, obj, stream=stream, allowed=allowed)
    upstream = UpstreamRequest(route, body.body, stream, facts.upstream)
    return Planned(obj, decision, upstream, body.drop_event, facts, arrived_us)


def proxied_request(state: ProxyState, planned: Planned) -> ProxiedRequest:
    """The ``ProxiedRequest`` of a planned request (counted in the sampling tally): what
    only its answer and records need, so ``proxy.lean`` makes it after the upstream write."""
    state.sampling.observe(planned.upstream.route, planned.obj)
    facts = planned.facts
    return ProxiedRequest(
        _request_ids(),
        planned.decision,
        planned.upstream,
        planned.drop_event,
        warmup=facts.warmup,
        arrived_us=planned.arrived_us,
        client_body=planned.obj if state.config.record else None,
        category=facts.category,
    )
