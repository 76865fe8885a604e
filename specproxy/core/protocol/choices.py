"""The choices of an OpenAI stream event (chat or completions chunks), read the general way
(``read_choices``) and, for the commonest chat event, the short way: one choice 0 with plain
``content`` and nothing else on it (no ``usage``, ``sglext`` or ``timings``; no finish
reason, token list, reasoning or tool calls).

Pure: parsed JSON in, plain values out, the text pieces kept per choice index in the
caller's dict. ``plain_delta`` is the one rule of the short paths: ``StreamInterpreter``'s
(``core.protocol.events``) for one event, and ``take_plain_run``'s for a run of them, the
end-of-stream fold's loop (``core.measurement.measure.measure_recorded``): one JSON parse per event and
no ``Chunk``, with the checks of ``StreamInterpreter._openai`` and ``_plain_chat_choice``
inlined. It runs in C when ``core.speedups`` has the module (``core/_speedups.c``, which
reads most events by the one before instead of parsing them); ``take_plain_run_py`` is the
reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from specproxy.core.protocol.fields import chat_text, int_or_none, listed_tokens
from specproxy.core.speedups import SPEEDUPS
from specproxy.errors import ProtocolError

_C_TAKE_PLAIN_CHAT = SPEEDUPS.take_plain_chat if SPEEDUPS is not None else None


def read_choices(
    choices: list[Any], chat: bool, pieces: dict[int, list[str]]
) -> tuple[bool, str | None, int, int | None]:
    """One OpenAI event's choices (``chat``: chat chunks, else completions chunks): output
    carried, finish reason, the first choice's index, and the tokens the event lists itself
    (token ids, logprobs), if any. Each choice that carries output adds one text piece to
    ``pieces`` (by choice index), even an empty one: the text-length weights count on it."""
    output = False
    finish: str | None = None
    index = 0
    listed: int | None = None
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            raise ProtocolError("a choice is not a JSON object")
        idx = int_or_none(choice.get("index")) or 0
        if i == 0:
            index = idx
        if chat:
            delta = choice.get("delta")
            text, calls = chat_text(delta) if isinstance(delta, dict) else ("", False)
            carries = bool(text) or calls
        else:
            raw = choice.get("text")
            text = raw if isinstance(raw, str) else ""
            carries = bool(text) or choice.get("finish_reason") is None
        finish = finish or choice.get("finish_reason")
        if carries:  # one piece per output event of the choice, even empty (weights)
            pieces.setdefault(idx, []).append(text)
            output = True
        if "token_ids" in choice or ("logprobs" in choice and choice["logprobs"] is not None):
            found = listed_tokens(choice)
            if found is not None:
                listed = (listed or 0) + found
    return output, finish, index, listed


def plain_delta(choice: dict[str, Any]) -> dict[str, Any] | None:
    """The ``delta`` of a plain chat choice (choice 0, no finish reason, no token list,
    no reasoning or tool calls), else None: the one rule of the short chat paths."""
    delta = choice.get("delta")
    if (
        type(delta) is not dict
        or choice.get("finish_reason") is not None
        or "token_ids" in choice
        or choice.get("logprobs") is not None
        or int_or_none(choice.get("index"))
        or delta.get("reasoning_content") is not None
        or delta.get("reasoning") is not None
        or delta.get("tool_calls")
    ):
        return None
    return delta


def take_plain_run(
    pieces_of: dict[int, list[str]],
    events: Sequence[tuple[int, str]],
    start: int,
    offsets: list[int],
) -> int:
    """Read the run of plain chat events at ``events[start:]`` (data fields with their times).

    A plain event's content is appended to choice 0's text pieces in ``pieces_of`` and, if
    it is output, its time to ``offsets``. Returns the index of the first event that is not
    plain (or ``len(events)``), which the caller interprets in full.
    """
    if _C_TAKE_PLAIN_CHAT is not None and type(events) is list:
        found: tuple[int, list[str] | None] = _C_TAKE_PLAIN_CHAT(
            events, start, offsets, pieces_of.get(0), orjson.loads, orjson.JSONDecodeError
        )
        i, pieces = found
        if pieces is not None:
            pieces_of[0] = pieces
        return i
    return take_plain_run_py(pieces_of, events, start, offsets)


def take_plain_run_py(
    pieces_of: dict[int, list[str]],
    events: Sequence[tuple[int, str]],
    start: int,
    offsets: list[int],
) -> int:
    """``take_plain_run`` in Python: the reference for ``core/_speedups.c``."""
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    pieces = pieces_of.get(0)
    end = len(events)
    i = start
    while i < end:
        t_us, data = events[i]
        if data[:1] != "{":
            return i  # "[DONE]", empty data, anything but an object: interpret_data's
        try:
            obj = loads(data)
        except decode_error:
            return i  # malformed JSON: interpret_data's
        if (
            type(obj) is not dict
            or obj.get("usage") is not None
            or obj.get("sglext") is not None
            or obj.get("timings") is not None
        ):
            return i
        choices = obj.get("choices")
        if type(choices) is not list or len(choices) != 1:
            return i
        choice = choices[0]
        if type(choice) is not dict:
            return i
        delta = plain_delta(choice)
        if delta is None:
            return i
        content = delta.get("content")
        if type(content) is str and content:
            if pieces is None:
                pieces = pieces_of[0] = []
            pieces.append(content)
            offsets.append(t_us)
        i += 1
    return end
