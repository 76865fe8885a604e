"""The single sink for request records: append-only JSONL, per-side histograms, the run log.

Owns ``RUN_DIR/requests.jsonl`` (one ``RequestRecord.to_dict()`` per line, appended and
flushed as each request completes, so a killed run leaves every completed record
readable), ``RUN_DIR/histograms/<side>.hlog`` (HdrHistogram interval logs, one tagged
histogram per metric, mergeable across proxy replicas) and ``RUN_DIR/specproxy.log``
(one ``request_completed`` JSON line per record, keyed by experiment id, side and
launch fingerprint; never prompt or output text).

Writes are small synchronous appends on the event loop's thread: one record is a few
hundred bytes, and keeping them synchronous keeps "one record per request" trivially
ordered and complete.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TextIO

import orjson

from specproxy.core.histogram import (
    HISTOGRAM_METRICS,
    LatencyHistogram,
    format_histogram_log,
    histogram_figures,
)
from specproxy.core.model import RequestRecord, Role
from specproxy.core.tally import DEFAULT_MAX_SEND_LAG_MS, SideSummary, SideTally
from specproxy.log import file_logger


class Recorder:
    """Appends records and keeps per-side histograms for one run directory."""

    def __init__(self, run_dir: Path, *, experiment_id: str) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "histograms").mkdir(exist_ok=True)
        self._records = (run_dir / "requests.jsonl").open("ab")
        self._log_file: TextIO = (run_dir / "specproxy.log").open("a", encoding="utf-8")
        self._log = file_logger(self._log_file, experiment_id=experiment_id)
        self._tallies = {role: SideTally(role) for role in Role}
        self._hist = {role: {m: LatencyHistogram() for m in HISTOGRAM_METRICS} for role in Role}
        self._itl_estimated = dict.fromkeys(Role, 0)
        self._start_unix_s = time.time()
        self._closed = False

    def write(self, record: RequestRecord) -> None:
        """Append ``record`` (flushed), count it (``core.tally``: warm-up counted apart) and,
        unless warm-up, add it to the histograms."""
        if self._closed:
            raise RuntimeError("Recorder is closed")
        self._records.write(orjson.dumps(record.to_dict(), option=orjson.OPT_APPEND_NEWLINE))
        self._records.flush()
        m = record.measurement
        error_kind = m.error_kind.value if m.error_kind is not None else None
        self._tallies[record.side].add(record)
        if not record.warmup:
            self._observe(record)
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

    def _observe(self, record: RequestRecord) -> None:
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
        itl = m.itl_us  # the one ITL definition (core.model.Measurement.itl_us)
        for latency_us, count in itl:
            h["itl_us"].record(latency_us, count)
        if m.chunk_tokens_estimated:
            self._itl_estimated[record.side] += sum(count for _, count in itl)

    def itl_estimated_tokens(self, side: Role) -> int:
        """How many of ``side``'s ``itl_us`` histogram samples rest on estimated tokens per event."""
        return self._itl_estimated[side]

    def stats(self, side: Role) -> SideTally:
        """The running tally of ``side`` (counts so far; read-only for callers)."""
        return self._tallies[side]

    def summary(self, side: Role, max_send_lag_ms: float = DEFAULT_MAX_SEND_LAG_MS) -> SideSummary:
        """The per-side summary so far (``core.tally``: what every report shows)."""
        return self._tallies[side].summary(max_send_lag_ms)

    def figures(
        self, side: Role, max_send_lag_ms: float = DEFAULT_MAX_SEND_LAG_MS
    ) -> dict[str, Any]:
        """``side``'s figures as experiment.json stores them: the summary's JSON form, plus
        ITL from the histogram (``estimated_tokens``: samples on estimated tokens)."""
        out = self.summary(side, max_send_lag_ms).to_dict()
        out["itl_us"] = histogram_figures(self._hist[side]["itl_us"])
        out["itl_us"]["estimated_tokens"] = self._itl_estimated[side]
        return out

    def histogram(self, side: Role, metric: str) -> LatencyHistogram:
        return self._hist[side][metric]

    def flush_histograms(self) -> None:
        """Rewrite ``histograms/<side>.hlog`` with the histograms so far (atomic replace)."""
        end = time.time()
        for role in Role:
            entries = [(name, self._hist[role][name]) for name in HISTOGRAM_METRICS]
            text = format_histogram_log(entries, start_unix_s=self._start_unix_s, end_unix_s=end)
            path = self.run_dir / "histograms" / f"{role.value}.hlog"
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
        self._log_file.close()
