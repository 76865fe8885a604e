"""Readers for foreign trace formats, converted on the fly into ``TraceRecord``.

Each ``iter_*`` function takes a file's path (for error messages) and text and yields,
in file order, either a record or the ``TraceFormatError`` for a line it could not read
(yielded, not raised, so the caller decides between failing and ``--skip-bad``).
Offsets are seconds in the file's own time base; ``readers`` shifts every file so its
earliest request is at 0.

- Mooncake (JSONL): ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``.
  A line without ``hash_ids`` is accepted with none: its synthesised prompt shares no
  prefix with any other request (as if every block were its own).
- Azure LLM inference trace (CSV): ``TIMESTAMP`` (``YYYY-MM-DD HH:MM:SS.fffffff``, 100 ns
  ticks; Python's ``%f`` takes only 6 digits, so ticks are parsed by hand), ``ContextTokens``,
  ``GeneratedTokens``. Offsets are relative to the first row; a row earlier than the first
  is a bad line.
- ShareGPT (JSON array or JSONL): ``conversations`` (or ``conversation``) of ``from``/``value``
  (or ``role``/``content``) turns; the first human turn is the prompt and the answer after
  it, when present, is kept as the reference answer.
- Prompt sets (JSONL, e.g. MT-Bench ``question.jsonl``): ``turns`` (list of user turns) or a
  single ``prompt``/``question`` string, ``category`` kept. First turn only unless
  ``all_turns``: then turn k is sent with the earlier turns and, as the assistant's
  earlier answers, the file's reference answers (or a fixed placeholder when the file
  has none; say so when reporting acceptance on such turns).
  The reference answer is the first of ``REFERENCE_KEYS`` a line has: ``reference``
  (MT-Bench), ``canonical_solution`` (HumanEval), ``answer`` (GSM8K). A string is the
  first turn's answer. A list on a line with ``turns`` holds one answer per turn (element
  k for turn k); on a single-prompt line it holds alternative answers, and the first
  non-empty string is used. Within a turn's element, a list also means alternatives.
  Any other value (a number, an object) is no reference answer.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
from collections.abc import Iterator
from typing import Any

from specproxy.errors import TraceFormatError
from specproxy.replay.native import hash_ids_field, int_field, parse_native
from specproxy.replay.trace import MESSAGE_ROLES, Message, TraceRecord

Item = TraceRecord | TraceFormatError

PLACEHOLDER_ANSWER = "(The previous answer was not recorded.)"
_HUMAN = frozenset({"human", "user"})
_ASSISTANT = frozenset({"gpt", "assistant", "chatgpt", "bard", "model"})
_AZURE_TS = re.compile(r"^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,7}))?$")
_EPOCH = dt.datetime(1970, 1, 1)


def split_lines(text: str) -> list[str]:
    """Lines split on ``\\n`` only (JSON strings may hold U+2028), ``\\r`` stripped."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _json_lines(path: str, text: str) -> Iterator[tuple[int, object] | TraceFormatError]:
    """(line number, decoded object) for each non-blank line, or the error for a bad one."""
    for lineno, line in enumerate(split_lines(text), 1):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            yield TraceFormatError(path, lineno, f"not valid JSON: {exc.msg} (column {exc.colno})")


def _convert(
    path: str, items: Iterator[tuple[int, object] | TraceFormatError], convert: Any
) -> Iterator[Item]:
    """``convert(obj, path, line)``'s records for each decoded item; a failure is a bad line."""
    for item in items:
        if isinstance(item, TraceFormatError):
            yield item
            continue
        lineno, obj = item
        try:
            yield from convert(obj, path, lineno)
        except (ValueError, TypeError, KeyError) as exc:
            yield TraceFormatError(path, lineno, str(exc))


def iter_native(path: str, text: str) -> Iterator[Item]:
    """Records of a specproxy-native JSONL trace."""

    def convert(obj: object, p: str, lineno: int) -> Iterator[TraceRecord]:
        yield parse_native(obj, p, lineno)

    return _convert(path, _json_lines(path, text), convert)


def _mooncake(obj: object, path: str, lineno: int) -> Iterator[TraceRecord]:
    if not isinstance(obj, dict):
        raise ValueError("a Mooncake line must be a JSON object")
    ts = obj.get("timestamp")
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        raise ValueError(f"'timestamp' must be a number of milliseconds, got {ts!r}")
    hash_ids = hash_ids_field(obj)
    yield TraceRecord(
        source_path=path,
        source_line=lineno,
        offset_s=ts / 1000.0,
        input_tokens=int_field(obj, "input_length"),
        output_tokens=int_field(obj, "output_length"),
        hash_ids=hash_ids,
    )


def iter_mooncake(path: str, text: str) -> Iterator[Item]:
    """Records of a Mooncake trace (timestamps in ms, 512-token hash blocks)."""
    return _convert(path, _json_lines(path, text), _mooncake)


def azure_ticks(value: str) -> int:
    """A ``YYYY-MM-DD HH:MM:SS.fffffff`` timestamp as 100 ns ticks since 1970 (naive)."""
    m = _AZURE_TS.match(value.strip())
    if m is None:
        raise ValueError(f"TIMESTAMP {value!r} is not YYYY-MM-DD HH:MM:SS.fffffff")
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    frac = (m.group(7) or "").ljust(7, "0")
    whole = dt.datetime(y, mo, d, h, mi, s) - _EPOCH
    return (whole.days * 86_400 + whole.seconds) * 10_000_000 + int(frac)


def iter_azure(path: str, text: str) -> Iterator[Item]:
    """Records of an Azure LLM inference trace CSV; offsets relative to the first row."""
    lines = split_lines(text)
    if not lines:
        return
    try:
        header = [h.strip() for h in next(csv.reader([lines[0]]))]
    except csv.Error as exc:  # e.g. a bare carriage return inside the line
        yield TraceFormatError(path, 1, f"CSV header is not readable: {exc}")
        return
    need = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
    missing = [n for n in need if n not in header]
    if missing:
        yield TraceFormatError(path, 1, f"CSV header lacks column {missing[0]!r}")
        return
    col = {n: header.index(n) for n in need}
    first_ticks: int | None = None
    for lineno, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        try:
            row = next(csv.reader([line]))
            short = [n for n in need if col[n] >= len(row)]
            if short:
                raise ValueError(f"row has {len(row)} columns: no value for {short[0]!r}")
            ticks = azure_ticks(row[col["TIMESTAMP"]])
            if first_ticks is None:
                first_ticks = ticks
            if ticks < first_ticks:
                raise ValueError("TIMESTAMP is earlier than the first row's")
            yield TraceRecord(
                source_path=path,
                source_line=lineno,
                offset_s=(ticks - first_ticks) / 10_000_000,
                input_tokens=int(row[col["ContextTokens"]]),
                output_tokens=int(row[col["GeneratedTokens"]]),
            )
        except (ValueError, IndexError, csv.Error) as exc:
            yield TraceFormatError(path, lineno, str(exc) or "row has too few columns")


def _turn(item: object) -> tuple[str, str]:
    if not isinstance(item, dict):
        raise ValueError("each conversation turn must be an object")
    speaker = item.get("from", item.get("role"))
    value = item.get("value", item.get("content"))
    if not isinstance(speaker, str) or not isinstance(value, str):
        raise ValueError("each turn needs string 'from' and 'value'")
    return speaker.lower(), value


def _sharegpt(obj: object, path: str, lineno: int) -> Iterator[TraceRecord]:
    if not isinstance(obj, dict):
        raise ValueError("a ShareGPT entry must be a JSON object")
    turns = obj.get("conversations", obj.get("conversation"))
    if not isinstance(turns, list):
        raise ValueError("missing 'conversations' list")
    parsed = [_turn(t) for t in turns]
    first = next((i for i, (who, _) in enumerate(parsed) if who in _HUMAN), None)
    if first is None or not parsed[first][1].strip():
        raise ValueError("the conversation has no non-empty human turn")
    answer = next(
        (v for who, v in parsed[first + 1 :] if who in _ASSISTANT and v.strip()),
        None,
    )
    conv_id = obj.get("id")
    yield TraceRecord(
        source_path=path,
        source_line=lineno,
        offset_s=None,
        messages=(("user", parsed[first][1]),),
        conversation_id=str(conv_id) if conv_id is not None else None,
        reference_answer=answer,
    )


def _array_elements(path: str, text: str) -> Iterator[tuple[int, object] | TraceFormatError]:
    """(line of the element's start, element) for each element of a top-level JSON array."""
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    line = 1 + text.count("\n", 0, pos)
    while True:
        start = pos
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        line += text.count("\n", start, pos)
        if pos >= len(text):
            yield TraceFormatError(path, line, "JSON array is not closed")
            return
        if text[pos] == "]":
            return
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            yield TraceFormatError(path, exc.lineno, f"not valid JSON: {exc.msg}")
            return
        yield line, obj
        line += text.count("\n", pos, end)
        pos = end


def iter_sharegpt(path: str, text: str) -> Iterator[Item]:
    """Records of a ShareGPT-style file: a JSON array, or one conversation per line."""
    array = text.lstrip().startswith("[")
    items = _array_elements(path, text) if array else _json_lines(path, text)
    return _convert(path, items, _sharegpt)


PROMPT_KEYS = ("prompt", "question", "instruction", "query", "input", "text", "content")


def _prompt_turns(obj: dict[str, Any]) -> list[str]:
    turns = obj.get("turns")
    if turns is None:
        single = next((obj[k] for k in PROMPT_KEYS if k in obj), None)
        turns = [single] if single is not None else None
    if not isinstance(turns, list) or not turns:
        raise ValueError(
            "a prompt line needs 'turns' (a list), 'messages' (OpenAI chat messages) or one of "
            + ", ".join(repr(k) for k in PROMPT_KEYS)
            + " (a string)"
        )
    if any(not isinstance(t, str) or not t.strip() for t in turns):
        raise ValueError("every turn must be a non-empty string")
    return turns


def _chat_messages(obj: dict[str, Any], path: str, lineno: int) -> TraceRecord:
    """An OpenAI chat request line (``messages`` plus optional ``max_tokens``)."""
    raw = obj["messages"]
    if not isinstance(raw, list) or not raw:
        raise ValueError("'messages' must be a non-empty list")
    messages: list[Message] = []
    for m in raw:
        role = m.get("role") if isinstance(m, dict) else None
        content = m.get("content") if isinstance(m, dict) else None
        if role not in MESSAGE_ROLES or not isinstance(content, str):
            raise ValueError("each message needs a role (system/user/assistant) and string content")
        messages.append((role, content))
    limit = obj.get("max_completion_tokens", obj.get("max_tokens"))
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError("max_tokens must be a positive integer")
    category = obj.get("category")
    return TraceRecord(
        source_path=path,
        source_line=lineno,
        offset_s=None,
        messages=tuple(messages),
        output_tokens=limit,
        category=str(category) if category is not None else None,
    )


REFERENCE_KEYS = ("reference", "canonical_solution", "answer")
"""Where a prompt line's reference answer is read from, first found wins (module docstring)."""


def _answer_text(value: object) -> str | None:
    """A non-empty answer string, or the first one in a list of alternatives; else None."""
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, list):
        return next((v for v in value if isinstance(v, str) and v.strip()), None)
    return None


def reference_answers(obj: dict[str, Any], turns: int) -> list[str | None]:
    """The reference answer of each of ``turns`` turns (None where the line has none)."""
    key = next((k for k in REFERENCE_KEYS if k in obj), None)
    value = obj.get(key) if key is not None else None
    if isinstance(value, list) and "turns" in obj:
        per_turn = [_answer_text(v) for v in value[:turns]]
    else:
        per_turn = [_answer_text(value)]
    return per_turn + [None] * (turns - len(per_turn))


def _prompts(obj: object, path: str, lineno: int, all_turns: bool) -> Iterator[TraceRecord]:
    if not isinstance(obj, dict):
        raise ValueError("a prompt line must be a JSON object")
    if "messages" in obj and "turns" not in obj:
        yield _chat_messages(obj, path, lineno)
        return
    turns = _prompt_turns(obj)
    refs = reference_answers(obj, len(turns))
    category = obj.get("category")
    qid = obj.get("question_id", obj.get("id", obj.get("task_id")))
    history: list[Message] = []
    for k, turn in enumerate(turns if all_turns else turns[:1]):
        ref = refs[k]
        yield TraceRecord(
            source_path=path,
            source_line=lineno,
            offset_s=None,
            messages=(*history, ("user", turn)),
            category=str(category) if category is not None else None,
            turn_index=k,
            conversation_id=str(qid) if qid is not None else None,
            reference_answer=ref,
        )
        history += [("user", turn), ("assistant", ref or PLACEHOLDER_ANSWER)]


def iter_prompts(path: str, text: str, *, all_turns: bool = False) -> Iterator[Item]:
    """Records of a prompt set such as MT-Bench's question.jsonl."""

    def convert(obj: object, p: str, lineno: int) -> Iterator[TraceRecord]:
        return _prompts(obj, p, lineno, all_turns)

    return _convert(path, _json_lines(path, text), convert)
