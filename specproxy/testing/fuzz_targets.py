"""Fuzz targets and seed inputs, shared by the Hypothesis tests and ``bench/fuzz.py``.

A target takes one generated input and raises only when the code under test is wrong:
an exception other than the ones its contract names, or a broken invariant. The
contracts:

- SSE decoder (``core.protocol.sse``): never raises; the same events however the bytes are split.
- Protocol interpreter (``core.protocol.events`` through ``core.measurement.measure.ResponseMeter``, and
  ``core.protocol.body.interpret_body``): the meter never raises, whatever it is fed,
  for every route, streaming or not, any status; a direct ``StreamInterpreter`` and
  ``interpret_body`` raise ``ProtocolError`` only; an error summary is always a string.
- Trace readers (``replay.formats``): every line yields a record or a ``TraceFormatError``
  naming ``file:line``; ``detect_format`` raises ``ConfigError`` only.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
from collections.abc import Sequence
from functools import cache

from specproxy.core.measurement.measure import ResponseMeter
from specproxy.core.protocol.body import interpret_body
from specproxy.core.protocol.errortext import summarize_error_body
from specproxy.core.protocol.events import Dialect, StreamInterpreter
from specproxy.core.protocol.sse import SseDecoder, SseEvent
from specproxy.core.records.model import Measurement, Route
from specproxy.errors import ConfigError, ProtocolError, TraceFormatError
from specproxy.replay import formats
from specproxy.replay.readers import detect_format
from specproxy.replay.trace import TraceFormat, TraceRecord
from specproxy.testing import REPO
from specproxy.testing.captures import LLAMACPP, SGLANG, parse_http

TRACE_FILES = {
    TraceFormat.NATIVE: REPO / "traces" / "sample_native.jsonl",
    TraceFormat.MOONCAKE: REPO / "traces" / "mooncake_conversation_300.jsonl",
    TraceFormat.AZURE: REPO / "traces" / "azure_code_300.csv",
    TraceFormat.SHAREGPT: REPO / "traces" / "sharegpt_v3_first200.json",
    TraceFormat.PROMPTS: REPO / "traces" / "mtbench_question.jsonl",
}
READERS = {
    TraceFormat.NATIVE: formats.iter_native,
    TraceFormat.MOONCAKE: formats.iter_mooncake,
    TraceFormat.AZURE: formats.iter_azure,
    TraceFormat.SHAREGPT: formats.iter_sharegpt,
    TraceFormat.PROMPTS: formats.iter_prompts,
}


@cache
def capture_bodies() -> tuple[bytes, ...]:
    """Response bodies of the real captures: SGLang (all routes) and llama.cpp streams."""
    bodies: list[bytes] = []
    for path in sorted(SGLANG.glob("*/*/*.http")):
        cap = parse_http(path.read_bytes())
        if cap.body:
            bodies.append(cap.body)
    for path in sorted(LLAMACPP.glob("*/*/*.sse-times.json")):
        lines = json.loads(path.read_text())
        bodies.append("".join(str(line) for _ms, line in lines).encode())
    return tuple(dict.fromkeys(bodies))  # distinct, in a stable order


@cache
def trace_lines(fmt: TraceFormat) -> tuple[str, ...]:
    """Seed lines of ``fmt`` (ShareGPT: one JSON object per element, as JSONL)."""
    text = TRACE_FILES[fmt].read_text(encoding="utf-8")
    if fmt is TraceFormat.SHAREGPT:
        return tuple(json.dumps(item) for item in json.loads(text)[:50])
    lines = [line for line in formats.split_lines(text) if line.strip()]
    return tuple(lines[:60])


PROTOCOL_KEYS = (
    "choices", "delta", "message", "content", "reasoning_content", "text", "index",
    "finish_reason", "usage", "prompt_tokens", "completion_tokens", "meta_info",
    "tool_calls", "function", "arguments", "sglext", "spec_tokens_details", "timings",
    "error", "tokens", "stop", "stop_type", "object", "matched_stop", "output_ids",
)  # fmt: skip
"""The field names the interpreters read, for structure-aware generated events."""


def sse_body(objects: Sequence[object], done: bool) -> bytes:
    """``objects`` as an SSE stream of JSON data events (``[DONE]`` last when ``done``)."""
    events = [b"data: " + json.dumps(o).encode() + b"\n\n" for o in objects]
    return b"".join(events) + (b"data: [DONE]\n\n" if done else b"")


def decode_pieces(pieces: Sequence[bytes]) -> list[SseEvent]:
    """Every event ``SseDecoder`` gives for ``pieces`` fed in order, then flushed."""
    decoder = SseDecoder()
    events: list[SseEvent] = []
    for piece in pieces:
        events.extend(decoder.feed(piece))
    events.extend(decoder.flush())
    return events


def split_at(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    """``data`` cut at the given offsets (clamped, sorted)."""
    points = sorted({min(max(c, 0), len(data)) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def check_sse(data: bytes, cuts: Sequence[int]) -> None:
    """The decoder gives the same events for ``data`` whole and cut at ``cuts``."""
    whole = decode_pieces([data])
    pieces = decode_pieces(split_at(data, cuts))
    if whole != pieces:
        raise AssertionError(f"split-dependent events: {len(whole)} whole vs {len(pieces)} cut")


def _meter(route: Route, stream: bool, status: int, pieces: Sequence[bytes]) -> Measurement:
    meter = ResponseMeter(route, stream)
    meter.on_headers(10, status)
    for i, piece in enumerate(pieces):
        meter.feed(20 + i, piece)
    return meter.finish(20 + len(pieces))


def check_protocol(
    data: bytes,
    cuts: Sequence[int],
    status: int = 200,
    cases: Sequence[tuple[Route, bool]] | None = None,
) -> None:
    """The meter measures ``data`` without raising (every route and stream flag, or ``cases``);
    the interpreters raise ProtocolError only; an error summary is always a string."""
    pieces = split_at(data, cuts)
    chosen = cases if cases is not None else [(r, s) for r in Route for s in (True, False)]
    for route, stream in chosen:
        if not isinstance(_meter(route, stream, status, pieces), Measurement):
            raise AssertionError("the meter returned no Measurement")
    dialects = {Dialect.for_route(route) for route, _ in chosen}
    if cases is None:
        dialects = set(Dialect)
        meter = ResponseMeter(Route.COMPLETIONS, True, dialect=Dialect.LLAMACPP_COMPLETION)
        meter.on_headers(1, status)
        meter.feed(2, data)
        meter.finish(3)
    events = decode_pieces([data])
    for dialect in dialects:
        interp = StreamInterpreter(dialect)
        for event in events:
            try:
                interp.interpret(event)
            except ProtocolError:
                continue
        with contextlib.suppress(ProtocolError):
            interpret_body(dialect, data)
    if not isinstance(summarize_error_body(status, data), str):
        raise AssertionError("the error summary is not a string")


def check_reader(fmt: TraceFormat, text: str) -> None:
    """Every item ``fmt``'s reader yields for ``text`` is a record or a file:line error."""
    for item in READERS[fmt]("fuzz.trace", text):
        if isinstance(item, TraceFormatError):
            if not str(item).startswith("fuzz.trace:"):
                raise AssertionError(f"error without file:line: {item}")
        elif not isinstance(item, TraceRecord):
            raise AssertionError(f"reader yielded {type(item).__name__}")
    with contextlib.suppress(ConfigError):
        detect_format("fuzz.jsonl", text)


def mutate(
    rng: random.Random, data: bytes, tokens: Sequence[bytes], other: bytes | None = None
) -> bytes:
    """``data`` with one to four edits: one of ``tokens`` inserted, a range deleted, a bit
    flipped, a range repeated, or (with ``other``) the rest replaced by a slice of it. One
    mutator for the socket fuzz and ``bench/fuzz.py``."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(out))
        op = rng.randrange(4 if other is None else 5)
        if op == 0:
            out[at:at] = rng.choice(tokens)
        elif op == 1:
            del out[at : at + rng.randint(1, 32)]
        elif op == 2 and out:
            out[min(at, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif op == 3 or other is None:
            out[at:at] = out[at : at + rng.randint(1, 64)]
        else:
            cut = rng.randint(0, len(other))
            out[at:] = other[cut : cut + rng.randint(0, 512)]
    return bytes(out)
