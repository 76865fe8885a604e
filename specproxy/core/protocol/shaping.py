"""A relayed request's body: parsed as SGLang reads it, and what the proxy adds upstream.

Pure: parses and re-serialises JSON, reads no clock and does no I/O.

Added upstream only to **streaming** requests on the OpenAI routes of SGLang servers
(other bodies go byte for byte; servers of kind ``openai`` get nothing, as some send
usage unasked): ``return_spec_tokens_details`` (SGLang 0.5.19 or newer) when the client
asked for no ``sglext`` content, and ``stream_options.include_usage`` when the client did
not and the server does not send usage by default; the event so added (the ``sglext`` or
usage-only one, ``injected_events``) is withheld from the client. Mirror adds only what
both sides allow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from specproxy.core.protocol.fields import lax_bool
from specproxy.core.protocol.injected_events import (
    EventFilter,
    is_sglext_event,
    is_usage_only_event,
)
from specproxy.core.protocol.sse import SseEvent
from specproxy.core.records.model import Route


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
