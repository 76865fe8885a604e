"""A relayed request, planned: its headers read, its body shaped, its sides decided.

The server (``proxy.lean``) relays the generation routes (``RELAYED``, ``PUT /generate``
too, as SGLang accepts it): ``header_facts`` reads a request's headers, ``plan`` its body,
sides (``SidePolicy``) and upstream body (``plan_upstream``), ``proxied_request`` the rest.

Sides: ``passthrough``, the primary (or the forced side) only; ``mirror``, the primary
(or the forced side) answers and the other side gets a shadow copy; ``split``, the forced
side, else the sticky key's BLAKE2b hash in [0, 1) (one side in every replica, across
restarts), else a seedable random draw; a draw below ``split`` goes to the candidate.

Added upstream only to **streaming** requests on the OpenAI routes of SGLang servers
(other bodies go byte for byte; servers of kind ``openai`` get nothing, as some send
usage unasked): ``return_spec_tokens_details`` (SGLang 0.5.19 or newer) when the client
asked for no ``sglext`` content, and ``stream_options.include_usage`` when the client did
not and the server does not send usage by default; the event so added (the ``sglext`` or
usage-only one) is withheld from the client. Mirror adds only what both sides allow.

The client's Authorization goes upstream unchanged unless ``api_key`` (checked by the
server) or a per-side upstream key is set. The headers ``x-specproxy-side``, ``-warmup``
and ``-category`` are read here, never sent upstream. No text or key is logged from here.
"""

from __future__ import annotations

import hashlib
import os
import random
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from specproxy.backends.base import FRAMING_HEADERS, EventFilter, SharedHeaders, UpstreamRequest
from specproxy.core.protocol.fields import lax_bool
from specproxy.core.protocol.headers import (
    CATEGORY_HEADER,
    CATEGORY_MAX_CHARS,
    SIDE_HEADER,
    WARMUP_HEADER,
    parse_category,
)
from specproxy.core.protocol.injected_events import is_sglext_event, is_usage_only_event
from specproxy.core.protocol.sse import SseEvent
from specproxy.core.records.model import Role, Route, SendMode
from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.messages import Response, bad_request

if TYPE_CHECKING:
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
_UNIT = float(1 << 64)


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


class RequestIds:
    """Request ids: 16 hex digits, a random prefix drawn once per process (a forked child,
    e.g. a worker of ``serve --workers N``, draws anew) and a counter: unique within a run,
    with no system call per request; after 2**32 ids a new prefix is drawn."""

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
class Decision:
    """The side whose answer the client gets, and the (other) side that gets a shadow copy."""

    primary: Role
    shadow: Role | None = None


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


def sticky_user(body: Mapping[str, object]) -> str | None:
    """The body's ``user`` field as a sticky key (with ``sticky_user`` configured)."""
    user = body.get("user")
    return user if isinstance(user, str) and user else None


def stable_unit(key: str) -> float:
    """A uniform-looking number in [0, 1) that depends only on ``key``."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _UNIT


class SidePolicy:
    """Decides, per request, the primary side and the shadow side (see the module docstring)."""

    __slots__ = ("_decisions", "_mode", "_primary", "_rng", "_split")

    def __init__(
        self, mode: SendMode, primary: Role, split: float, *, seed: int | None = None
    ) -> None:
        if mode not in (SendMode.MIRROR, SendMode.SPLIT, SendMode.PASSTHROUGH):
            raise ValueError(f"the proxy does not support mode {mode}")
        if not 0.0 <= split <= 1.0:
            raise ValueError(f"split must be between 0 and 1, got {split}")
        self._mode = mode
        self._primary = primary
        self._split = split
        self._rng = random.Random(seed)
        # every decision there is, made once (they are values): by primary side
        mirror = mode is SendMode.MIRROR
        self._decisions = {r: Decision(r, r.other if mirror else None) for r in Role}

    def decide(self, *, forced: Role | None = None, sticky: str | None = None) -> Decision:
        """The decision for one request."""
        decisions = self._decisions
        if self._mode is SendMode.SPLIT:
            if forced is not None:
                return decisions[forced]
            draw = stable_unit(sticky) if sticky is not None else self._rng.random()
            return decisions[Role.CANDIDATE if draw < self._split else Role.BASELINE]
        return decisions[forced if forced is not None else self._primary]


class BadRequest(ValueError):
    """The client's body cannot be used; the message names the problem."""


def parse_body(raw: bytes) -> dict[str, Any]:
    """The client's JSON object; BadRequest naming the problem (with the byte position)."""
    if not raw.strip():
        raise BadRequest("request body is empty; expected a JSON object")
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(
            f"request body is not valid JSON: {exc.msg} at position {exc.pos}"
        ) from None
    if not isinstance(obj, dict):
        raise BadRequest(f"request body must be a JSON object, got {type(obj).__name__}")
    return obj


def is_streaming(obj: dict[str, Any]) -> bool:
    """Whether the server will stream: ``stream`` read as SGLang reads it (``lax_bool``);
    BadRequest (400) for a value SGLang would refuse."""
    value = obj.get("stream")
    found = lax_bool(value)
    if found is None:
        raise BadRequest(f"stream: expected a boolean, got {_describe_value(value)}")
    return found


def _describe_value(value: Any) -> str:
    if isinstance(value, str):
        return f"a string of {len(value)} characters"  # the value itself is not echoed
    return type(value).__name__


@dataclass(frozen=True, slots=True)
class Injection:
    """What the proxy may add upstream for one server (or the AND over both, in mirror mode)."""

    spec_details: bool = False
    usage: bool = False

    def __and__(self, other: Injection) -> Injection:
        return Injection(self.spec_details and other.spec_details, self.usage and other.usage)


NO_INJECTION = Injection()
_SGLEXT_FLAGS = (
    "return_spec_tokens_details",
    "return_cached_tokens_details",
    "return_routed_experts",
    "return_input_ids_in_sglext",
    "return_output_ids_in_sglext",
)


@dataclass(frozen=True, slots=True)
class UpstreamPlan:
    """The body to send upstream and the events to withhold from the client."""

    body: bytes
    drop_event: EventFilter | None = None


def _drop_both(event: SseEvent) -> bool:
    return is_sglext_event(event) or is_usage_only_event(event)


def plan_upstream(
    route: Route, raw: bytes, obj: dict[str, Any], *, stream: bool, allowed: Injection
) -> UpstreamPlan:
    """The upstream body for ``obj`` (``raw`` untouched unless something is added)."""
    if not stream or route is Route.GENERATE or allowed == NO_INJECTION:
        return UpstreamPlan(raw)
    add_spec = allowed.spec_details and not any(obj.get(flag) for flag in _SGLEXT_FLAGS)
    options = obj.get("stream_options")
    add_usage = (
        allowed.usage
        and (options is None or isinstance(options, dict))
        and not (options or {}).get("include_usage")
    )
    if not add_spec and not add_usage:
        return UpstreamPlan(raw)
    upstream = dict(obj)
    if add_spec:
        upstream["return_spec_tokens_details"] = True
    if add_usage:
        upstream["stream_options"] = {**(options or {}), "include_usage": True}
    if add_spec and add_usage:
        return UpstreamPlan(orjson.dumps(upstream), _drop_both)
    return UpstreamPlan(
        orjson.dumps(upstream), is_sglext_event if add_spec else is_usage_only_event
    )


def requested_temperature(route: Route, obj: Any) -> str:
    """The request's temperature as a label: a number's text, or ``default``."""
    if not isinstance(obj, dict):
        return "default"
    source = obj.get("sampling_params") if route is Route.GENERATE else obj
    value = source.get("temperature") if isinstance(source, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "default"
    return f"{float(value):g}"


@dataclass(frozen=True, slots=True)
class ProxiedRequest:
    """One client request the proxy relays: parsed, its sides decided, ready to send (a value:
    the modules below read its fields, and its route is ``upstream.route``)."""

    request_id: str
    decision: Decision
    upstream: UpstreamRequest
    drop_event: EventFilter | None = None
    warmup: bool = False  # the client marked it (header x-specproxy-warmup): kept out of stats
    arrived_us: int = 0  # arrival at the proxy, on the proxy's clock (for `--record`)
    client_body: dict[str, Any] | None = None  # as the client sent it (kept for `--record`)
    category: str | None = None  # the prompt's category (header x-specproxy-category)


@dataclass(frozen=True, slots=True)
class HeaderFacts:
    """What ``plan`` reads from a request's headers: a function of the headers alone, so
    kept for a request head seen before (``upstream`` then ``SharedHeaders``, read only)."""

    forced: Role | None  # x-specproxy-side
    category: str | None  # x-specproxy-category
    warmup: bool  # x-specproxy-warmup
    sticky: str | None  # the sticky header's value, when one is configured
    upstream: dict[str, str]  # the headers to send upstream (``upstream_headers``)


def header_facts(
    cfg: ProxyConfig, headers: Mapping[str, str], *, shared: bool = False
) -> HeaderFacts | Response:
    """``headers`` read for ``plan``; an error response when they cannot be used. ``shared``:
    for many requests (a known head), so the upstream headers are ``SharedHeaders``."""
    try:
        forced = parse_forced_side(headers.get(SIDE_HEADER))
    except ValueError as exc:
        return bad_request(str(exc), code="invalid_side_header", param=SIDE_HEADER)
    category = headers.get(CATEGORY_HEADER)
    if category is not None and (category := parse_category(category)) is None:
        message = f"{CATEGORY_HEADER} must be 1 to {CATEGORY_MAX_CHARS} printable ASCII characters"
        return bad_request(message, code="invalid_category_header", param=CATEGORY_HEADER)
    upstream = upstream_headers(headers, keep_auth=cfg.api_key is None)
    if shared:
        upstream = SharedHeaders(upstream)
        upstream.derived = {}
    return HeaderFacts(
        forced,
        category,
        headers.get(WARMUP_HEADER, "").strip() in {"1", "true"},
        None if cfg.sticky_header is None else headers.get(cfg.sticky_header),
        upstream,
    )


class Planned(NamedTuple):
    """A request ``plan`` has decided, for ``proxied_request`` to make its ``ProxiedRequest``."""

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
    """Parse a whole request body and decide its sides; an error response when it cannot be
    used. ``facts``: ``header_facts`` of its headers (their error response, if any, comes
    after the body's: a body that cannot be used is named first)."""
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
    injection = state.injection  # both sides get one body: mirror takes the AND
    allowed = injection.get(decision.primary, NO_INJECTION)
    if decision.shadow is not None:
        allowed = allowed & injection.get(decision.shadow, NO_INJECTION)
    body = plan_upstream(route, raw, obj, stream=stream, allowed=allowed)
    upstream = UpstreamRequest(route, body.body, stream, facts.upstream)
    return Planned(obj, decision, upstream, body.drop_event, facts, arrived_us)


def proxied_request(state: ProxyState, planned: Planned) -> ProxiedRequest:
    """The ``ProxiedRequest`` of a planned request (counted in the sampling tally): what
    only its answer and records need, so ``proxy.lean`` makes it after the upstream write."""
    state.sampling[requested_temperature(planned.upstream.route, planned.obj)] += 1
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
