"""The C fold loop (``core/_speedups.c``) reads every event list exactly as the Python loop.

``core.protocol.choices.take_plain_run_py`` is the reference. The C loop reads most events
through a template (the event before, less its content) instead of a parse, so the
events here are made to be near misses of one: the same chunk with its content, its
``created`` or its other fields changed, content strings with quotes, backslashes,
escapes and control characters, raw edits that break the JSON at any place, duplicate
keys and spaced JSON.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import tracemalloc
from functools import partial
from itertools import pairwise
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specproxy.core import speedups
from specproxy.core.measurement import histogram
from specproxy.core.measurement.measure import measure_recorded
from specproxy.core.protocol import choices as protocol_choices
from specproxy.core.protocol import sse_split
from specproxy.core.protocol.choices import take_plain_run_py
from specproxy.core.protocol.events import Dialect, StreamInterpreter
from specproxy.core.records.model import Measurement, Role, Route
from specproxy.proxy import metrics, records
from specproxy.testing.captures import SGLANG_SERVERS, sglang_exchange
from tests.core.test_sse_property import _stream

C = speedups.SPEEDUPS
needs_c = pytest.mark.skipif(C is None, reason="the C speedups are not built here")


def test_the_c_module_is_there_when_it_must_be() -> None:
    """CI builds it (``.ci/run`` sets SPECPROXY_REQUIRE_SPEEDUPS): a failed build fails here."""
    if os.environ.get("SPECPROXY_REQUIRE_SPEEDUPS"):
        assert C is not None
        assert protocol_choices._C_TAKE_PLAIN_CHAT is C.take_plain_chat
        assert histogram._C_HDR_ADD is C.hdr_add
        assert records._C_BUCKET_COUNTS is C.bucket_counts


def test_the_environment_can_switch_it_off() -> None:
    code = (
        "from specproxy.core import speedups; from specproxy.core.measurement import measure;"
        " from specproxy.core.protocol import choices as protocol_choices;"
        " print(speedups.SPEEDUPS, protocol_choices._C_TAKE_PLAIN_CHAT)"
    )
    env = {**os.environ, "SPECPROXY_PURE_PYTHON": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["None", "None"]


def _chunk(content: Any, created: int = 1796061008, **extra: Any) -> dict[str, Any]:
    delta: dict[str, Any] = {"reasoning_content": None, "content": content}
    choice: dict[str, Any] = {
        "index": 0,
        "delta": delta,
        "logprobs": None,
        "finish_reason": None,
        "matched_stop": None,
    }
    for key, value in extra.items():
        where, _, name = key.partition("__")
        {"delta": delta, "choice": choice}[where][name] = value
    return {
        "id": "7a02f7b9",
        "object": "chat.completion.chunk",
        "created": created,
        "model": "m",
        "choices": [choice],
    }


_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"])
    | st.sampled_from(
        ['"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "\u2028", "é", "😀", "x", "y"]
    ),
    max_size=8,
)
_OTHER = st.one_of(
    st.none(), st.booleans(), st.integers(-1, 2), _TEXT, st.just([]), st.just([{"id": "t"}])
)
_FIELDS = [
    "delta__role",
    "delta__tool_calls",
    "delta__reasoning",
    "delta__reasoning_content",
    "choice__index",
    "choice__finish_reason",
    "choice__logprobs",
    "choice__token_ids",
]


@st.composite
def _data(draw: st.DrawFn) -> str:
    """One event's data field: mostly a chunk of the stream, now and then bent or broken."""
    content = draw(_TEXT | _OTHER) if draw(st.integers(0, 9)) == 0 else draw(_TEXT)
    extra = {
        k: draw(_OTHER) for k in draw(st.lists(st.sampled_from(_FIELDS), unique=True, max_size=2))
    }
    if draw(st.integers(0, 3)):
        extra = {}
    created = draw(st.sampled_from([1796061008, 1796061008, 1796061009]))
    obj = _chunk(content, created, **extra)
    shape = draw(st.integers(0, 19))
    if shape == 0:
        obj["usage"] = draw(_OTHER)
    if shape == 1:
        obj["choices"].append(dict(obj["choices"][0]))
    text = orjson.dumps(obj).decode()
    if shape == 2:  # spaced JSON: no template can be found in it
        text = text.replace(":", ": ")
    if shape == 3:  # a duplicate content key: the last one counts
        text = text.replace(
            '"content":', f'"content":{orjson.dumps(draw(_TEXT)).decode()},"content":', 1
        )
    if shape == 4:  # content also elsewhere
        text = text.replace(
            '"model":"m"', f'"model":"m","content":{orjson.dumps(draw(_TEXT)).decode()}'
        )
    if shape in (5, 6, 7):  # a raw edit anywhere: an inserted, dropped or replaced character
        at = draw(st.integers(0, len(text)))
        char = draw(st.sampled_from(['"', "\\", "x", "\x01", "}", ",", "\ud800", "u"]))
        text = {
            5: text[:at] + char + text[at:],
            6: text[:at] + text[at + 1 :],
            7: text[:at] + char + text[at + 1 :],
        }[shape]
    if shape == 8:
        text = draw(st.sampled_from(["[DONE]", "", "[1]", '"s"', "{", "{}"]))
    return text


_EVENTS = st.lists(_data(), min_size=0, max_size=12).map(
    lambda ds: [(10 * (i + 1), d) for i, d in enumerate(ds)]
)


def _read(
    events: list[tuple[int, str]], start: int, c: bool
) -> tuple[int, list[int], list[str] | None]:
    interp = StreamInterpreter(Dialect.CHAT)
    offsets: list[int] = []
    take = interp.take_plain_chat if c else partial(take_plain_run_py, interp._pieces)
    end = take(events, start, offsets)
    return end, offsets, interp._pieces.get(0)


@needs_c
@settings(max_examples=3000, deadline=None)
@given(events=_EVENTS, start=st.integers(0, 3))
def test_the_c_loop_reads_any_events_as_the_python_loop(
    events: list[tuple[int, str]], start: int
) -> None:
    start = min(start, len(events))
    assert _read(events, start, c=True) == _read(events, start, c=False)


@needs_c
@settings(max_examples=300, deadline=None)
@given(contents=st.lists(_TEXT, min_size=2, max_size=30))
def test_a_run_of_content_chunks_is_read_whole(contents: list[str]) -> None:
    """The commonest stream: the same chunk with its content changed, each one read."""
    events = [(i, orjson.dumps(_chunk(c)).decode()) for i, c in enumerate(contents)]
    end, offsets, pieces = _read(events, 0, c=True)
    assert end == len(events)
    assert pieces == ([c for c in contents if c] or None)
    assert offsets == [i for i, c in enumerate(contents) if c]


@needs_c
def test_a_broken_event_after_a_template_stops_the_loop_there() -> None:
    good = orjson.dumps(_chunk("a")).decode()
    broken = [
        good.replace('"a"', '"a\x01"'),  # a raw control character: not JSON
        good.replace('"a"', '"a\\q"'),  # a bad escape
        good.replace('"a"', '"\\ud800"'),  # a lone surrogate escape
        good.replace('"a"', '"a""'),  # a quote too many
    ]
    for bad in broken:
        events = [(1, good), (2, good), (3, bad), (4, good)]
        assert _read(events, 0, c=True) == _read(events, 0, c=False)
        assert _read(events, 0, c=True)[0] == 2
    spaced = [(1, good), (2, good + " "), (3, good)]  # not the template's suffix: parsed
    assert _read(spaced, 0, c=True) == _read(spaced, 0, c=False) == (3, [1, 2, 3], ["a"] * 3)


@needs_c
def test_events_are_checked_as_the_python_loop_checks_them() -> None:
    events: list[Any] = [(1, orjson.dumps(_chunk("a")).decode()), ("not", "a pair", "at all")]
    assert _read(events, 0, c=True) == (1, [1], ["a"])
    with pytest.raises(TypeError):
        C.take_plain_chat((), 0, [], None, orjson.loads, orjson.JSONDecodeError)  # type: ignore[union-attr]
    with pytest.raises(ZeroDivisionError):  # an error of loads itself goes up
        C.take_plain_chat(  # type: ignore[union-attr]
            [(1, "{}")], 0, [], None, lambda _: 1 / 0, orjson.JSONDecodeError
        )


def _heap_growth(call: Any, times: int) -> int:
    """Bytes the Python heap grew by over ``times`` calls of ``call``, after 200 to warm up
    (a missed decref in C leaves one object per call behind)."""
    for _ in range(200):
        call()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(times):
            call()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@needs_c
def test_the_c_loop_keeps_no_references() -> None:
    """Run many times, it leaves nothing behind (a missed decref would grow the heap)."""
    texts = ["a", 'q"uote', "back\\slash", "new\nline", "é😀", ""]
    events = [(i, orjson.dumps(_chunk(t)).decode()) for i, t in enumerate(texts * 5)]
    events.append((99, orjson.dumps(_chunk("z", created=7)).decode()))
    events.append((100, "[DONE]"))
    take = C.take_plain_chat  # type: ignore[union-attr]
    grown = _heap_growth(
        lambda: take(events, 0, [], None, orjson.loads, orjson.JSONDecodeError), 5000
    )
    assert grown < 20_000  # one leaked string per call would be 5,000 of them


@pytest.mark.parametrize("server", SGLANG_SERVERS)
@pytest.mark.parametrize("name", ["chat_stream_usage", "chat_stream_no_usage"])
def test_real_captures_fold_the_same_with_and_without_c(
    server: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, cap = sglang_exchange(server, name)
    chunks = [(i, cap.body[a : a + 97]) for i, a in enumerate(range(0, len(cap.body), 97))]
    assert sse_split.simple_events(chunks) is not None

    def fold() -> object:
        return measure_recorded(
            Route.CHAT, True, status=200, headers_us=1, chunks=chunks, end_us=10**6, keep_text=True
        )

    with_c = fold()
    monkeypatch.setattr(protocol_choices, "_C_TAKE_PLAIN_CHAT", None)
    monkeypatch.setattr(sse_split, "_C_SIMPLE_EVENTS", None)
    assert fold() == with_c


class _Transport:
    def __init__(self) -> None:
        self.n = 0

    def write(self, data: bytes) -> None:
        self.n += len(data)

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


class _Slow:
    def __init__(self) -> None:
        self.handed: list[bytes] = []

    def __call__(self, data: bytes) -> None:
        self.handed.append(data)

    def over_high_water(self) -> None:
        raise AssertionError("never full here")


@needs_c
def test_the_chunk_writer_frames_and_keeps_no_references() -> None:
    transport, slow = _Transport(), _Slow()
    write = C.ChunkWriter(transport, slow, b"[DONE]\n\n", 1 << 18)  # type: ignore[union-attr]
    write(b"abc")
    assert transport.n == len(b"3\r\nabc\r\n")
    write(b"data: [DONE]\n\n")  # the tail: handed over, not written
    assert slow.handed == [b"data: [DONE]\n\n"] and transport.n == 8
    data = b"x" * 300
    assert _heap_growth(lambda: write(data), 20000) < 20_000
    assert transport.n == 8 + 20200 * len(b"12c\r\n" + data + b"\r\n")


_FIELD = st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")) | st.sampled_from(
    [b"", b"[DONE]", b'{"a":1}', b"\xff\xfe", b"\xe2\x82", b"data: x", b"\r"]
)


@st.composite
def _body(draw: st.DrawFn) -> bytes:
    """A stream of data blocks, now and then bent: a stray newline, CR, comment, cut tail."""
    blocks = [b"data: " + f + b"\n\n" for f in draw(st.lists(_FIELD, max_size=8))]
    body = b"".join(blocks)
    bend = draw(st.integers(0, 9))
    if bend == 0 and body:
        at = draw(st.integers(0, len(body)))
        body = (
            body[:at] + draw(st.sampled_from([b"\n", b"\r", b": c\n", b"data:", b" "])) + body[at:]
        )
    if bend == 1 and body:
        body = body[: draw(st.integers(0, len(body)))]
    return body


@needs_c
@settings(max_examples=2000, deadline=None)
@given(body=_body() | _stream(), cuts=st.lists(st.integers(min_value=0), max_size=10))
def test_the_c_split_reads_any_stream_as_the_python_split(body: bytes, cuts: list[int]) -> None:
    points = sorted({c % (len(body) + 1) for c in cuts})
    bounds = [0, *points, len(body)]
    chunks = [(10 * (i + 1), body[a:b]) for i, (a, b) in enumerate(pairwise(bounds)) if b >= a]
    assert C.simple_events(chunks) == sse_split.simple_events_py(chunks)  # type: ignore[union-attr]


@needs_c
def test_the_c_split_keeps_no_references() -> None:
    body = b"".join(b"data: " + orjson.dumps(_chunk(t)) + b"\n\n" for t in ["a", "\xe9", "z"] * 8)
    chunks = [(i, body[a : a + 50]) for i, a in enumerate(range(0, len(body), 50))]
    split = C.simple_events  # type: ignore[union-attr]
    assert split(chunks) == sse_split.simple_events_py(chunks)
    assert _heap_growth(lambda: split(chunks), 3000) < 20_000


# ---- latency buckets: LatencyHistogram.record_many and the metrics' ITL histogram ----

_VALUES = st.one_of(
    st.integers(0, 5000),
    st.integers(0, 2**40),
    st.integers(histogram.HIGHEST_US - 2, histogram.HIGHEST_US + 2),
    st.sampled_from([-1, -(2**70), 2**63, 2**70, 1.5, True]),
)
_COUNTS = st.one_of(st.integers(1, 10**6), st.sampled_from([0, -1, 2**63, 2.0, False]))
_PAIRS = st.lists(st.tuples(_VALUES, _COUNTS), max_size=40)


def _hdr_state(h: histogram.LatencyHistogram) -> tuple[Any, ...]:
    inner = h._h
    return (bytes(inner.counts), inner.total_count, inner.min_value, inner.max_value, h.clamped)


def _record_batches(batches: list[list[tuple[Any, Any]]]) -> list[Any]:
    """Each batch recorded into one histogram: what each call raised, and its state."""
    h = histogram.LatencyHistogram()
    seen: list[Any] = []
    for batch in batches:
        try:
            h.record_many(batch)
            seen.append(None)
        except (ValueError, TypeError) as exc:
            seen.append((type(exc), str(exc)))
        seen.append(_hdr_state(h))
    return seen


@needs_c
@settings(max_examples=1500, deadline=None)
@given(batches=st.lists(_PAIRS, min_size=1, max_size=3))
def test_the_c_histogram_batch_lands_where_the_python_batch_does(
    batches: list[list[tuple[Any, Any]]],
) -> None:
    """Buckets, count, min, max, clamped and errors, batch after batch, with and without C
    (which takes only batches of int pairs in range, and leaves the rest to Python)."""
    with_c = _record_batches(batches)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(histogram, "_C_HDR_ADD", None)
        assert _record_batches(batches) == with_c


@needs_c
@given(st.lists(st.tuples(st.integers(0, histogram.HIGHEST_US), st.integers(1, 10**6))))
def test_the_c_histogram_takes_every_batch_in_range(pairs: list[tuple[int, int]]) -> None:
    h = histogram.LatencyHistogram()._h
    added = C.hdr_add(  # type: ignore[union-attr]
        h.counts,
        pairs,
        h.sub_bucket_mask,
        h.unit_magnitude + h.sub_bucket_half_count_magnitude + 1,
        h.sub_bucket_half_count_magnitude,
        h.unit_magnitude,
        h.sub_bucket_half_count,
        histogram.HIGHEST_US,
    )
    if not pairs:
        assert added is None
    else:
        assert added == (
            sum(c for _, c in pairs),
            min(v for v, _ in pairs),
            max(v for v, _ in pairs),
        )


_BOUNDS = [*metrics.TOKEN_BUCKETS_S, float("inf")]
_LATENCIES = st.one_of(
    st.integers(-10, 10**7),
    st.sampled_from([round(b * 1e6) + d for b in metrics.TOKEN_BUCKETS_S for d in (-1, 0, 1)]),
    st.sampled_from([2**53, 2**53 + 1, -(2**53) - 1, 2**70, 0.5, True]),
)
_TOKENS = st.one_of(st.integers(0, 10**6), st.sampled_from([-1, 2**53 + 1, 1.0]))


@needs_c
@settings(max_examples=1500, deadline=None)
@given(pairs=st.lists(st.tuples(_LATENCIES, _TOKENS), max_size=40))
def test_the_c_bucket_counts_equal_the_python_loop(pairs: list[tuple[Any, Any]]) -> None:
    """The same buckets and the same sum of seconds to the last bit, where C takes the
    list; it takes every list of int pairs within 2**53 with tokens >= 0."""
    done = C.bucket_counts(pairs, _BOUNDS)  # type: ignore[union-attr]
    common = all(
        type(a) is int and type(b) is int and abs(a) <= 2**53 and 0 <= b <= 2**53 for a, b in pairs
    )
    assert (done is not None) == common
    if done is not None:
        counts, total_s = records._bucket_counts_py(pairs, _BOUNDS)
        assert done[0] == counts and list(done[0]) == list(counts)  # also in the same order
        assert done[1].hex() == total_s.hex()


@needs_c
def test_the_metrics_itl_histogram_is_the_same_with_and_without_c() -> None:
    itl = [(900, 1), (1000, 2), (1001, 1), (4999, 3), (250_000, 1), (9_000_000, 2)]

    def exposition() -> str:
        registry_metrics = metrics.ProxyMetrics()
        m = Measurement(status=200, ttft_us=5000, e2e_us=70_000, completion_tokens=10)
        updates = records.MetricUpdates(registry_metrics)
        updates.finished(Role.BASELINE, Route.CHAT, m, shadow=False, itl=itl)
        return registry_metrics.render()

    with_c = exposition()
    assert (
        'specproxy_itl_seconds_bucket{le="0.002",route="/v1/chat/completions",side="baseline"} 4.0'
        in with_c
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(records, "_C_BUCKET_COUNTS", None)
        assert exposition() == with_c


@needs_c
def test_the_bucket_loops_keep_no_references() -> None:
    pairs = [(1000 * i + 7, i % 5 + 1) for i in range(64)]
    hist = histogram.LatencyHistogram()
    assert _heap_growth(lambda: hist.record_many(pairs), 3000) < 20_000
    count = C.bucket_counts  # type: ignore[union-attr]
    assert _heap_growth(lambda: count(pairs, _BOUNDS), 3000) < 20_000
