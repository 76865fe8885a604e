"""The short way through the commonest chat event reads it exactly as the general way does."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from specproxy.core.protocol.events import Chunk, Dialect, StreamInterpreter
from specproxy.core.protocol.sse import SseEvent

_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1, 2),
    st.sampled_from(["", "a", "héllo", "stop", "length"]),
    st.just([]),
    st.just([{"function": {"name": "f", "arguments": "{}"}}]),
    st.just({"content": [{"token": "a"}]}),
)
_TEXTS = st.sampled_from(["", "a", "bc"])
_DELTA_VALUES = st.one_of(_TEXTS, _TEXTS, _VALUES)  # text fields mostly hold text
_DELTA_KEYS = ["role", "content", "reasoning_content", "reasoning", "tool_calls"]
_CHOICE_KEYS = ["index", "delta", "finish_reason", "logprobs", "token_ids", "matched_stop"]


@st.composite
def _event(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(_DELTA_KEYS), unique=True))
    delta = {k: draw(_DELTA_VALUES) for k in keys}
    if draw(st.booleans()):
        delta["content"] = draw(st.sampled_from(["x", "yz", ""]))
    choice: dict[str, Any] = {
        k: draw(_VALUES) for k in draw(st.lists(st.sampled_from(_CHOICE_KEYS), unique=True))
    }
    choice["delta"] = delta if draw(st.integers(0, 5)) else draw(_VALUES)
    obj: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk"}
    obj["choices"] = [choice] if draw(st.integers(0, 5)) else [choice, dict(choice)]
    for key in draw(st.lists(st.sampled_from(["usage", "sglext", "timings"]), unique=True)):
        obj[key] = draw(_VALUES)
    return obj


class _GeneralOnly(StreamInterpreter):
    def _plain_chat_choice(self, choice: Any) -> Chunk | None:
        return None


@settings(max_examples=1000, deadline=None)
@given(events=st.lists(_event(), min_size=1, max_size=6))
def test_plain_chat_events_read_the_same_both_ways(events: list[dict[str, Any]]) -> None:
    short, general = StreamInterpreter(Dialect.CHAT), _GeneralOnly(Dialect.CHAT)
    for obj in events:
        event = SseEvent(b"", orjson.dumps(obj).decode())
        outcomes = []
        for interp in (short, general):
            try:
                outcomes.append(interp.interpret(event))
            except Exception as exc:  # the same error both ways
                outcomes.append(f"{type(exc).__name__}: {exc}")
        assert outcomes[0] == outcomes[1]
    assert short.text() == general.text()
    assert short._pieces == general._pieces


def test_the_commonest_event_takes_the_short_way() -> None:
    seen: list[Any] = []

    class _Spy(StreamInterpreter):
        def _plain_chat_choice(self, choice: Any) -> Chunk | None:
            found = super()._plain_chat_choice(choice)
            seen.append(found)
            return found

    interp = _Spy(Dialect.CHAT)
    data = '{"choices":[{"index":0,"delta":{"role":null,"content":"a","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null}],"usage":null}'
    chunk = interp.interpret(SseEvent(b"", data))
    assert chunk is not None and chunk.output and seen == [chunk]
    assert interp.text() == "a"
