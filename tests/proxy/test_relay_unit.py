"""The relay against scripted in-memory backends: records, pairing, the shadow bound and deadline."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from multidict import CIMultiDict

from specproxy.backends.base import UpstreamRequest
from specproxy.backends.exchange import Exchange, measure_exchange
from specproxy.core.load.sides import Decision
from specproxy.core.records.model import ErrorKind, RequestRecord, Role, Route, SendMode
from specproxy.proxy import records as records_module
from specproxy.proxy.client_answer import ClientAnswer, StreamTarget
from specproxy.proxy.messages import Response
from specproxy.proxy.metrics import ProxyMetrics
from specproxy.proxy.records import ProxyRecords
from specproxy.proxy.relay import ProxiedRequest, Relay, ShadowSupervisor
from specproxy.runtime import MonotonicClock
from specproxy.testing.harness import CHAT_EVENTS
from tests.backends.fake import FakeBackend

BODY = b'{"text":"hi","stream":true}'


class Records:
    """The relay's record writer, kept in memory."""

    def __init__(self) -> None:
        self.written: list[RequestRecord] = []
        # "write" (flushed at once), "append" (in a batch, not yet), "flush" (a batch's end)
        self.events: list[str] = []
        self.batching = False

    def write(self, record: RequestRecord, *, itl: list[tuple[int, int]] | None = None) -> None:
        assert itl is None or itl == record.measurement.itl_us  # computed once, and right
        self.written.append(record)
        self.events.append("append" if self.batching else "write")

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        self.batching = True
        try:
            yield
        finally:
            self.batching = False
            self.events.append("flush")


def _relay(
    baseline: FakeBackend,
    candidate: FakeBackend,
    records: Records,
    *,
    shadows: ShadowSupervisor | None = None,
    shadow_deadline_s: float = 30.0,
) -> Relay:
    backends = {Role.BASELINE: baseline, Role.CANDIDATE: candidate}
    proxy_records = ProxyRecords(
        backends=backends,
        recorder=records,
        metrics=ProxyMetrics(),
        clock=MonotonicClock(),
        experiment_id="exp-unit",
        mode=SendMode.MIRROR,
        fingerprints={Role.BASELINE: "fp-base", Role.CANDIDATE: "fp-cand"},
        shadow_deadline_s=shadow_deadline_s,
    )
    return Relay(
        backends=backends,
        records=proxy_records,
        shadows=shadows or ShadowSupervisor(8),
    )


def _mirrored(request_id: str) -> ProxiedRequest:
    upstream = UpstreamRequest(Route.GENERATE, BODY, stream=True)
    return ProxiedRequest(request_id, Decision(Role.BASELINE, Role.CANDIDATE), upstream)


class _Client:
    """A client's connection that keeps what it is sent (transport, writer and port)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(data)

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    async def drain(self) -> None:
        pass

    def open_stream(self, status: int, headers: CIMultiDict[str]) -> StreamTarget:
        self.sent.append(b"%d" % status)
        return self, self, False  # type: ignore[return-value]

    def write_whole(self, status: int, headers: CIMultiDict[str], body: bytes) -> None:
        self.sent += [b"%d" % status, body]


async def _serve(relay: Relay, proxied: ProxiedRequest) -> Response | _Client:
    """Relay ``proxied`` as the server does: the client's answer, or the failure response."""
    client = _Client()
    answer = ClientAnswer(client, proxied)
    m = await relay.relay_to(proxied, answer)
    if not answer.began:
        assert m is not None
        return relay.failure_response(proxied, m)
    return client


async def test_mirror_sends_the_same_request_to_both_and_pairs_the_records() -> None:
    """One mirrored exchange: both fakes get the same bytes, and two records share its pair_id."""
    baseline, candidate, records = (
        FakeBackend(Role.BASELINE),
        FakeBackend(Role.CANDIDATE),
        Records(),
    )
    shadows = ShadowSupervisor(8)
    relay = _relay(baseline, candidate, records, shadows=shadows)
    client = await _serve(relay, _mirrored("r1"))
    assert isinstance(client, _Client) and client.sent[0] == b"200"
    stream = b"".join(client.sent[1:])  # the primary's stream, whole
    assert stream.startswith(b"data: {") and stream.endswith(b"data: [DONE]\n\n")
    assert await shadows.drain(5.0) == 0  # the shadow copy ran to its end
    relay.records.flush()  # clean ends are recorded a moment later (``RecordSteps``)
    assert [r.body for r in baseline.sent] == [r.body for r in candidate.sent] == [BODY]
    by_side = {r.side: r for r in records.written}
    assert by_side[Role.BASELINE].shadow is False and by_side[Role.CANDIDATE].shadow is True
    assert {r.pair_id for r in records.written} == {"r1"}
    assert {r.fingerprint for r in records.written} == {"fp-base", "fp-cand"}
    assert all(r.ok and r.measurement.completion_tokens == 2 for r in records.written)


async def test_a_shadow_copy_over_the_bound_is_dropped_and_recorded() -> None:
    """With one shadow already in flight at a bound of one, the next copy is never sent: shadow_dropped."""
    gate = asyncio.Event()
    baseline = FakeBackend(Role.BASELINE)
    candidate = FakeBackend(Role.CANDIDATE, gate=gate)
    records = Records()
    shadows = ShadowSupervisor(1)
    relay = _relay(baseline, candidate, records, shadows=shadows)
    await _serve(relay, _mirrored("r1"))
    await candidate.until_sent(1)  # r1's shadow copy is at the candidate, held by the gate
    await _serve(relay, _mirrored("r2"))
    dropped = [r for r in records.written if r.side is Role.CANDIDATE]
    assert [(r.request_id, r.measurement.error_kind) for r in dropped] == [
        ("r2", ErrorKind.SHADOW_DROPPED)
    ]
    assert len(candidate.sent) == 1
    gate.set()
    assert await shadows.drain(5.0) == 0
    relay.records.flush()
    assert len(records.written) == 4
    shadow_r1 = next(
        r for r in records.written if r.side is Role.CANDIDATE and r.request_id == "r1"
    )
    assert shadow_r1.ok


async def test_a_shadow_past_its_deadline_is_recorded_as_timeout() -> None:
    """A shadow copy whose server never answers is cut at the shadow deadline and recorded as timeout."""
    candidate = FakeBackend(Role.CANDIDATE, gate=asyncio.Event())  # never opened
    records = Records()
    shadows = ShadowSupervisor(8)
    relay = _relay(
        FakeBackend(Role.BASELINE), candidate, records, shadows=shadows, shadow_deadline_s=0.05
    )
    await _serve(relay, _mirrored("r1"))
    assert await shadows.drain(5.0) == 0  # ended by its own deadline, not by the drain
    relay.records.flush()
    assert len(records.written) == 2
    shadow = next(r for r in records.written if r.side is Role.CANDIDATE)
    assert shadow.measurement.error_kind is ErrorKind.TIMEOUT
    assert "shadow deadline of 0.05 s exceeded" in (shadow.measurement.error_message or "")
    assert candidate.in_flight == 0


async def test_a_primary_that_cannot_connect_answers_502_and_is_recorded() -> None:
    """A primary failing before any header gives the client a 502 and one connect record."""
    baseline = FakeBackend(Role.BASELINE, fail=ErrorKind.CONNECT)
    records = Records()
    shadows = ShadowSupervisor(8)
    relay = _relay(baseline, FakeBackend(Role.CANDIDATE), records, shadows=shadows)
    response = await _serve(relay, _mirrored("r1"))
    assert isinstance(response, Response) and response.status == 502
    assert response.headers["x-specproxy-side"] == "baseline"
    assert await shadows.drain(5.0) == 0
    relay.records.flush()
    assert len(records.written) == 2
    primary = next(r for r in records.written if r.side is Role.BASELINE)
    assert primary.measurement.error_kind is ErrorKind.CONNECT


def _ended_exchange(loop: asyncio.AbstractEventLoop) -> Exchange:
    """An exchange whose chat stream ended cleanly (as ``backends.h1`` leaves one)."""
    ex = Exchange(loop, time.perf_counter_ns())
    ex.status = 200
    ex.headers["Content-Type"] = "text/event-stream"
    ex.headers_in.set_result(None)
    ex.chunks.extend([(100, CHAT_EVENTS[0]), (200, CHAT_EVENTS[1]), (300, CHAT_EVENTS[2])])
    ex.chunks.append((400, CHAT_EVENTS[3]))
    ex.end_us = 500
    ex.ended.set_result(None)
    return ex


def _end_exchanges(relay: Relay, n: int) -> None:
    """``n`` cleanly ended chat exchanges (``r0``...) handed to the record steps, in order."""
    loop = asyncio.get_running_loop()
    chat = UpstreamRequest(Route.CHAT, BODY, stream=True)
    for i in range(n):
        proxied = ProxiedRequest(f"r{i}", Decision(Role.BASELINE, None), chat)
        send = relay.records.stamp(proxied, Role.BASELINE, shadow=False)
        relay.records.updates.started(Role.BASELINE, shadow=False)  # as ``_Sent`` does
        relay.records.later(send, _ended_exchange(loop), time.perf_counter_ns(), None)


async def test_records_of_ended_exchanges_are_made_one_step_per_loop_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``RecordSteps``: 6 exchanges ending together are recorded in arrival order, each
    in two steps (its fold, then its record), and the event loop runs between any two
    steps: a callback scheduled by a step runs before the next step."""
    loop = asyncio.get_running_loop()
    records = Records()
    relay = _relay(FakeBackend(Role.BASELINE), FakeBackend(Role.CANDIDATE), records)
    real_measure, real_write = relay.records.measure, records.write
    done = loop.create_future()

    def turn() -> None:
        records.events.append("loop")
        if len(records.written) == 6 and not done.done():
            done.set_result(None)

    def measure(*args: Any) -> Any:
        records.events.append("fold")
        loop.call_soon(turn)
        return real_measure(*args)

    def write(record: RequestRecord, *, itl: list[tuple[int, int]] | None = None) -> None:
        real_write(record, itl=itl)
        loop.call_soon(turn)

    monkeypatch.setattr(relay.records, "measure", measure)
    monkeypatch.setattr(records, "write", write)
    _end_exchanges(relay, 6)
    assert records.written == []  # nothing before the delay
    await asyncio.wait_for(done, 5)
    assert records.events == ["fold", "loop", "write", "loop"] * 6  # flushed at once each
    assert [r.request_id for r in records.written] == [f"r{i}" for i in range(6)]
    assert all(r.ok and r.measurement.chunk_offsets_us for r in records.written)
    assert relay.records.flush() == 0  # nothing left waiting


async def test_flush_makes_every_waiting_record_at_once_written_out_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``flush`` after the first step: the record whose fold is done comes first, then the
    rest in order, in one write-out; the step that was scheduled is cancelled."""
    loop = asyncio.get_running_loop()
    records = Records()
    relay = _relay(FakeBackend(Role.BASELINE), FakeBackend(Role.CANDIDATE), records)
    real_measure = relay.records.measure
    first_fold = loop.create_future()

    def measure(*args: Any) -> Any:
        if not first_fold.done():
            first_fold.set_result(None)  # wakes this test before the relay's next step
        return real_measure(*args)

    monkeypatch.setattr(relay.records, "measure", measure)
    _end_exchanges(relay, 5)
    await first_fold  # (not wait_for: its wake-up would come after the relay's next step)
    assert (
        relay.records._steps._folded is not None and records.written == []
    )  # r0 folded, not recorded
    assert relay.records.flush() == 5
    assert [r.request_id for r in records.written] == [f"r{i}" for i in range(5)]
    assert records.events == ["append"] * 5 + ["flush"]
    assert relay.records._steps._step is None
    assert relay.records.flush() == 0


@pytest.mark.parametrize("failing", ["fold", "record"])
@pytest.mark.parametrize("made_by", ["flush", "loop"])
async def test_a_bug_in_one_record_loses_no_record(
    monkeypatch: pytest.MonkeyPatch, failing: str, made_by: str
) -> None:
    """A bug in r1's fold or in its metrics is logged, and every exchange still gets its
    one record, in order, by the loop's steps as by ``flush``: r1's says ``protocol``
    (an internal error) when its fold failed, and is r1's own when the metrics failed;
    the in-flight gauge comes back to zero."""
    loop = asyncio.get_running_loop()
    records = Records()
    relay = _relay(FakeBackend(Role.BASELINE), FakeBackend(Role.CANDIDATE), records)
    real_fold, real_finished, real_write = (
        measure_exchange,
        relay.records.updates.finished,
        records.write,
    )
    folds: list[None] = []
    finished_calls: list[None] = []
    last = loop.create_future()

    def fold(*args: Any, **kwargs: Any) -> Any:
        folds.append(None)
        if failing == "fold" and len(folds) == 2:  # r1's
            raise RuntimeError("a bug in the fold")
        return real_fold(*args, **kwargs)

    def finished(*args: Any, **kwargs: Any) -> None:
        real_finished(*args, **kwargs)
        finished_calls.append(None)
        if failing == "record" and len(finished_calls) == 2:  # r1's
            raise RuntimeError("a bug in the metrics")

    def write(record: RequestRecord, *, itl: list[tuple[int, int]] | None = None) -> None:
        real_write(record, itl=itl)
        if record.request_id == "r2":
            last.set_result(None)

    monkeypatch.setattr(records_module, "measure_exchange", fold)
    monkeypatch.setattr(relay.records.updates, "finished", finished)
    monkeypatch.setattr(records, "write", write)
    _end_exchanges(relay, 3)
    if made_by == "flush":
        assert relay.records.flush() == 3
    else:
        await asyncio.wait_for(last, 5)
    assert [r.request_id for r in records.written] == ["r0", "r1", "r2"]
    r1 = records.written[1].measurement
    if failing == "fold":
        assert r1.error_kind is ErrorKind.PROTOCOL and r1.status == 200 and r1.e2e_us == 500
        assert "could not be measured" in (r1.error_message or "")
    else:
        assert r1.ok and r1.chunk_offsets_us
    assert all(r.ok for r in (records.written[0], records.written[2]))
    assert relay.records.flush() == 0
    scrape = relay.records.metrics.render()
    assert 'specproxy_in_flight{role="primary",side="baseline"} 0.0' in scrape
