"""The single sink for request records: append-only JSONL, per-side histograms, the run log.

Owns ``RUN_DIR/requests.jsonl`` (one ``RequestRecord.to_dict()`` per line, appended and
flushed as each request completes, or once for a ``batch`` of them, so a killed run
leaves every record written out readable), ``RUN_DIR/histograms/<side>.hlog``
(HdrHistogram interval logs, one tagged
histogram per metric, mergeable across proxy replicas) and ``RUN_DIR/specproxy.log``
(one ``request_completed`` JSON line per record, keyed by experiment id, side and
launch fingerprint; never prompt or output text; appended in batches, ``log.LineLog``).

Long runs can roll the records file (``serve --rotate-mb / --rotate-s``): when the live
file reaches the size, or has been open that long, it is closed and renamed
``requests-NNNNNN.jsonl`` (numbered from 1, in write order) and a new ``requests.jsonl``
is started; a report reads the rolled set and the live file as one run. A record is
never split across files.

The per-side tallies (``core.records.tally``) are bounded: past ``exact_limit`` requests per side
(``EXACT_LIMIT``) their percentiles come from histograms and their memory stops growing,
so a proxy can run for days; ``specproxy report`` recomputes exactly from the records.

Writes are small synchronous appends on the event loop's thread: one record is about
1-9 KB (``bench/report_scale.py`` measures it by answer length), and keeping them
synchronous keeps "one record per request" trivially ordered and complete.

The proxy makes a cleanly ended request's record a moment later (``RecordSteps``):
requests end in bunches (a closed-loop client sends its next one at once), and folding a
response into its Measurement and writing its record then come after the work of the
requests that have just arrived, which is what their time to first token waits on,
instead of before it. ``RecordSteps.later`` queues an ended request; the steps begin at
most ``delay_s`` later, in the order the requests ended. Each record is made in two
steps, the fold and then the write (figures, metrics, the records file), one per turn,
so that the loop reads its sockets between any two: a request or a read that arrives
meanwhile waits for one step at most. Every stamp was taken already, so the figures do
not change. ``flush`` makes what is still waiting at once, written out together (the
shutdown calls it before closing the records).

A worker of ``serve --workers N`` (N > 1) is a Recorder with a ``shard``: its files carry
the shard in their names (``core.records.runfiles``), so the workers never share a file.
``RunFigures`` is the in-memory part (tallies, acceptance, histograms) on its own, which
is how the parent of the workers sums up their records at the end (``figures_from_records``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson

from specproxy.core.compare.acceptance import AcceptanceSummary, AcceptanceTally
from specproxy.core.measurement.histogram import (
    HISTOGRAM_METRICS,
    LatencyHistogram,
    format_histogram_log,
    histogram_figures,
)
from specproxy.core.records.model import RequestRecord, Role
from specproxy.core.records.runfiles import (
    histogram_name,
    log_name,
    records_name,
    rolled_glob,
    rolled_name,
)
from specproxy.core.records.tally import (
    DEFAULT_MAX_SEND_LAG_MS,
    EXACT_LIMIT,
    SideSummary,
    SideTally,
)
from specproxy.log import LineLog


class RunFigures:
    """Per-side tallies (``core.records.tally``), acceptance and histograms of the records added."""

    def __init__(self, exact_limit: int | None = EXACT_LIMIT) -> None:
        self._tallies = {role: SideTally(role, exact_limit) for role in Role}
        self._acceptance = {role: AcceptanceTally(role, exact_limit) for role in Role}
        self._hist = {role: {m: LatencyHistogram() for m in HISTOGRAM_METRICS} for role in Role}
        self._itl_estimated = dict.fromkeys(Role, 0)

    def add(self, record: RequestRecord, itl: list[tuple[int, int]] | None = None) -> None:
        """Count ``record`` (warm-up counted apart) and, unless warm-up, add it to the
        histograms; ``itl`` is its ``Measurement.itl_us`` when the caller has it already."""
        self._tallies[record.side].add(record)
        self._acceptance[record.side].add(record)
        if not record.warmup:
            self._observe(record, itl)

    def _observe(self, record: RequestRecord, itl: list[tuple[int, int]] | None) -> None:
        h = self._hist[record.side]
        lag = record.send_lag_us
        if lag is not None:
            h["send_lag_us"].record(max(lag, 0))
        m = record.measurement
        if not m.ok:
            return
        for name, value in (("ttft_us", m.ttft_us), ("tpot_us", m.tpot_us), ("e2e_us", m.e2e_us)):
            if value is not None:
                h[name].record(value)
        if itl is None:
            itl = m.itl_us  # the one ITL definition (core.records.model.Measurement.itl_us)
        h["itl_us"].record_many(itl)  # one batch per request, not a call per token
        if m.chunk_tokens_estimated:
            self._itl_estimated[record.side] += sum(count for _, count in itl)

    def itl_estimated_tokens(self, side: Role) -> int:
        """How many of ``side``'s ``itl_us`` histogram samples rest on estimated tokens per event."""
        return self._itl_estimated[side]

    def stats(self, side: Role) -> SideTally:
        """The running tally of ``side`` (counts so far; read-only for callers)."""
        return self._tallies[side]

    def summary(self, side: Role, max_send_lag_ms: float = DEFAULT_MAX_SEND_LAG_MS) -> SideSummary:
        """The per-side summary so far (``core.records.tally``: what every report shows)."""
        return self._tallies[side].summary(max_send_lag_ms)

    def figures(
        self, side: Role, max_send_lag_ms: float = DEFAULT_MAX_SEND_LAG_MS
    ) -> dict[str, Any]:
        """``side``'s figures as experiment.json stores them: the summary's JSON form, plus
        ITL from the histogram (``estimated_tokens``: samples on estimated tokens) and the
        per-request acceptance (``core.compare.acceptance``, as the report summarises it)."""
        out = self.summary(side, max_send_lag_ms).to_dict()
        out["itl_us"] = histogram_figures(self._hist[side]["itl_us"])
        out["itl_us"]["estimated_tokens"] = self._itl_estimated[side]
        a = self.acceptance(side)
        out["accept_length_mean"] = a.request_weighted_mean
        out["accept_length_token_weighted"] = a.token_weighted_mean
        out["accept_length_requests"] = a.n_requests
        out["accept_length_exactness"] = a.exactness
        out["accept_length_by_source"] = dict(a.sources)
        return out

    def acceptance(self, side: Role) -> AcceptanceSummary:
        """``side``'s per-request acceptance so far (completed, non-warm-up requests)."""
        return self._acceptance[side].summary()

    def histogram(self, side: Role, metric: str) -> LatencyHistogram:
        return self._hist[side][metric]


def figures_from_records(paths: list[Path], exact_limit: int | None = EXACT_LIMIT) -> RunFigures:
    """``RunFigures`` of the records in ``paths``, read in order. A final line cut off
    mid-write (a killed writer) is skipped, as the report skips it."""
    figures = RunFigures(exact_limit)
    for path in paths:
        with path.open("rb", buffering=1 << 20) as fh:
            for raw in fh:
                try:
                    data = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    if raw.strip() and raw.endswith(b"\n"):
                        raise
                    continue
                figures.add(RequestRecord.from_dict(data))
    return figures


class Recorder:
    """Appends records and keeps per-side histograms for one run directory (or one shard
    of it: ``shard``, see the module docstring)."""

    def __init__(
        self,
        run_dir: Path,
        *,
        experiment_id: str,
        rotate_bytes: int | None = None,
        rotate_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        exact_limit: int | None = EXACT_LIMIT,
        shard: str | None = None,
    ) -> None:
        if rotate_bytes is not None and rotate_bytes <= 0:
            raise ValueError(f"rotate_bytes must be > 0, got {rotate_bytes}")
        if rotate_s is not None and rotate_s <= 0:
            raise ValueError(f"rotate_s must be > 0, got {rotate_s}")
        self.run_dir = run_dir
        self.shard = shard
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "histograms").mkdir(exist_ok=True)
        self._rotate_bytes, self._rotate_s, self._clock = rotate_bytes, rotate_s, clock
        self._rolled = len(list(run_dir.glob(rolled_glob(shard))))
        self._records = (run_dir / records_name(shard)).open("ab")
        self._opened = self._clock()
        self._log = LineLog(run_dir / log_name(shard), experiment_id=experiment_id)
        self.figures_so_far = RunFigures(exact_limit)
        self._start_unix_s = time.time()
        self._closed = False
        self._batching = False  # inside ``batch``: records are flushed at its end

    def write(self, record: RequestRecord, *, itl: list[tuple[int, int]] | None = None) -> None:
        """Append ``record`` (flushed, or at the end of the ``batch`` it is written in),
        count it (``core.records.tally``: warm-up counted apart) and, unless warm-up, add it to the
        histograms. ``itl`` is its ``Measurement.itl_us`` when the caller has it already
        (the proxy computes it once per request)."""
        if self._closed:
            raise RuntimeError("Recorder is closed")
        self._records.write(orjson.dumps(record.to_dict(), option=orjson.OPT_APPEND_NEWLINE))
        if not self._batching:
            self._records.flush()
        self._maybe_roll()
        m = record.measurement
        error_kind = m.error_kind.value if m.error_kind is not None else None
        self.figures_so_far.add(record, itl)
        self._log.info(
            "request_completed",
            side=record.side.value,
            fingerprint=record.fingerprint,
            request_id=record.request_id,
            pair_id=record.pair_id,
            route=record.route.value,
            shadow=record.shadow,
            status=m.status,
            error_kind=error_kind,
            ttft_us=m.ttft_us,
            e2e_us=m.e2e_us,
            completion_tokens=m.completion_tokens,
        )

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """The records written inside are flushed together, once, when it ends (one system
        call for the batch)."""
        self._batching = True
        try:
            yield
        finally:
            self._batching = False
            if not self._closed:
                self._records.flush()

    def _maybe_roll(self) -> None:
        """Roll the live records file when it reached ``rotate_bytes`` or is ``rotate_s`` old."""
        full = self._rotate_bytes is not None and self._records.tell() >= self._rotate_bytes
        old = self._rotate_s is not None and self._clock() - self._opened >= self._rotate_s
        if not (full or old):
            return
        self._records.close()
        self._rolled += 1
        live = self.run_dir / records_name(self.shard)
        live.replace(self.run_dir / rolled_name(self._rolled, self.shard))
        self._records = live.open("ab")
        self._opened = self._clock()

    @property
    def rolled_files(self) -> int:
        """How many records files were rolled so far (``requests-NNNNNN.jsonl``)."""
        return self._rolled

    def itl_estimated_tokens(self, side: Role) -> int:
        """How many of ``side``'s ``itl_us`` histogram samples rest on estimated tokens per event."""
        return self.figures_so_far.itl_estimated_tokens(side)

    def stats(self, side: Role) -> SideTally:
        """The running tally of ``side`` (counts so far; read-only for callers)."""
        return self.figures_so_far.stats(side)

    def summary(self, side: Role, max_send_lag_ms: float = DEFAULT_MAX_SEND_LAG_MS) -> SideSummary:
        """The per-side summary so far (``core.records.tally``: what every report shows)."""
        return self.figures_so_far.summary(side, max_send_lag_ms)

    def figures(
        self, side: Role, max_send_lag_ms: float = DEFAULT_MAX_SEND_LAG_MS
    ) -> dict[str, Any]:
        """``side``'s figures as experiment.json stores them (``RunFigures.figures``)."""
        return self.figures_so_far.figures(side, max_send_lag_ms)

    def acceptance(self, side: Role) -> AcceptanceSummary:
        """``side``'s per-request acceptance so far (completed, non-warm-up requests)."""
        return self.figures_so_far.acceptance(side)

    def histogram(self, side: Role, metric: str) -> LatencyHistogram:
        return self.figures_so_far.histogram(side, metric)

    def flush_histograms(self) -> None:
        """Rewrite ``histograms/<side>.hlog`` (a shard's: ``<side>.<shard>.hlog``) with the
        histograms so far (atomic replace)."""
        self._log.flush()
        end = time.time()
        for role in Role:
            entries = [(name, self.histogram(role, name)) for name in HISTOGRAM_METRICS]
            text = format_histogram_log(entries, start_unix_s=self._start_unix_s, end_unix_s=end)
            path = self.run_dir / "histograms" / histogram_name(role.value, self.shard)
            tmp = path.with_suffix(".hlog.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)

    def close(self) -> None:
        """Flush histograms and close the files. Idempotent."""
        if self._closed:
            return
        self.flush_histograms()
        self._closed = True
        self._records.close()
        self._log.close()


Ended = TypeVar("Ended")  # a request that has ended, not yet folded
Folded = TypeVar("Folded")  # its Measurement with what its record needs


class RecordSteps(Generic[Ended, Folded]):
    """The records still to make; see the module docstring (``RecordSteps``).

    ``fold`` turns an ended request into what ``write`` records; ``batch`` opens a block
    whose writes go out together (``Recorder.batch``); ``failed`` is called, inside the
    ``except`` block, when a step raised (a bug in one record loses no other).
    """

    def __init__(
        self,
        *,
        fold: Callable[[Ended], Folded],
        write: Callable[[Folded], None],
        batch: Callable[[], contextlib.AbstractContextManager[None]],
        failed: Callable[[Folded], None],
        delay_s: float,
    ) -> None:
        self._fold = fold
        self._write = write
        self._batch = batch
        self._failed = failed
        self._delay_s = delay_s
        self._waiting: collections.deque[Ended] = collections.deque()
        self._folded: Folded | None = None  # folded in the last step, to write in the next
        self._step: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def later(self, ended: Ended) -> None:
        """Record ``ended`` within ``delay_s``, after those that ended before it."""
        self._waiting.append(ended)
        if self._step is None:
            loop = self._loop
            if loop is None:  # looked up once: each lookup is a system call
                loop = self._loop = asyncio.get_running_loop()
            self._step = loop.call_later(self._delay_s, self._run)

    def flush(self) -> int:
        """Make every record still waiting now, written out together; returns how many.
        Raises what the batch's write raised (a full disk)."""
        step, self._step = self._step, None
        if step is not None:
            step.cancel()
        made = len(self._waiting) + (self._folded is not None)
        with self._batch():
            while self._folded is not None or self._waiting:
                self.step()
        return made

    def _run(self) -> None:
        """One step; the next in the next turn."""
        self._step = None
        try:
            self.step()
        finally:
            if (self._waiting or self._folded is not None) and self._loop is not None:
                self._step = self._loop.call_soon(self._run)

    def step(self) -> None:
        """Write the request folded in the last step, else fold the next one waiting."""
        folded, self._folded = self._folded, None
        if folded is not None:
            try:
                self._write(folded)
            except Exception:
                self._failed(folded)
        elif self._waiting:
            self._folded = self._fold(self._waiting.popleft())
