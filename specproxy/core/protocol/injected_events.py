"""The stream events the proxy asks for on a client's behalf, recognised so it can withhold them.

The proxy may ask an upstream for ``stream_options.include_usage`` (the usage-only
``choices: []`` event) or for SGLang >= 0.5.19's ``sglext`` event, to measure tokens and
acceptance, when the client did not ask for them (``core.protocol.shaping``). These predicates
tell those events apart from the raw data, parsing only events that can be one. Pure.
"""

from __future__ import annotations

from collections.abc import Callable

from specproxy.core.protocol.fields import loads_or_none
from specproxy.core.protocol.sse import SseEvent

_EMPTY_CHOICES = ('"choices":[]', '"choices": []')


def is_sglext_event(event: SseEvent) -> bool:
    """True for SGLang's trailing ``choices: []`` event carrying ``sglext`` and no usage."""
    data = event.data
    if data is None or '"sglext"' not in data or not any(s in data for s in _EMPTY_CHOICES):
        return False
    obj = loads_or_none(data)
    return (
        isinstance(obj, dict)
        and obj.get("choices") == []
        and obj.get("sglext") is not None
        and obj.get("usage") is None
    )


def is_usage_only_event(event: SseEvent) -> bool:
    """True for the ``choices: []`` event that carries ``usage`` (the include_usage chunk)."""
    data = event.data
    if data is None or '"usage"' not in data or not any(s in data for s in _EMPTY_CHOICES):
        return False
    obj = loads_or_none(data)
    return isinstance(obj, dict) and obj.get("choices") == [] and obj.get("usage") is not None


MARKERS = tuple(s.encode() for s in _EMPTY_CHOICES)
"""Byte strings one of which every event these predicates accept contains in its raw bytes:
a read without any of them (and ending on an event boundary) holds nothing to withhold."""


EventFilter = Callable[[SseEvent], bool]
"""Returns True for an SSE event that must NOT be passed to the client (an injected one)."""
