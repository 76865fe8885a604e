"""CPU cost of one request's record in the proxy, part by part, on a 32-event chat stream.

Not a test: prints figures. The stream is what the calibrated stand-in upstream sends
(``bench/standin_upstream.py``: one token of content per event, 2 ms apart, then the
finishing event and ``[DONE]``), kept as ``backends.h1`` keeps it (one ``(t_us, bytes)``
per read). Each part runs ``--repeat`` times per round, and its figure is the best
round's CPU time (``time.process_time``) per call, so that other work on a shared machine
inflates it as little as possible:

- ``fold``: ``core.measurement.measure.measure_recorded``, the stream folded into its Measurement;
- ``RequestRecord.to_dict + dumps``: the records file's line;
- ``RunFigures.add``: the recorder's tallies, acceptance and HdrHistograms (ITL per token);
- ``MetricUpdates.finished``: the Prometheus counters and histograms (ITL per token), with
  the request's ``started`` (as ``bench/metrics_speed.py`` times them);
- ``LineLog.info``: the run log's ``request_completed`` line (rendered, not written).

``SPECPROXY_PURE_PYTHON=1`` measures the Python paths instead of the C speedups.
``--evict-mib N`` times each call alone instead (thread CPU time, the median of
``--repeat`` calls), each after a write to every cache line of N MiB: the caches as a
live proxy finds them on a shared machine, where other processes run between two records
(``bench/record_live.py`` times the same parts inside a proxy under load).

Usage: ``python bench/record_speed.py [--repeat 2000] [--rounds 15] [--evict-mib N]`` from
the repository root.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from meter_speed import best_cpu_s
from standin_upstream import LAST, event

from specproxy.core.measurement.measure import measure_recorded
from specproxy.core.records.model import Measurement, RequestRecord, Role, Route, SendMode
from specproxy.core.speedups import SPEEDUPS
from specproxy.log import LineLog
from specproxy.proxy.metrics import ProxyMetrics
from specproxy.proxy.records import MetricUpdates
from specproxy.recording.recorder import RunFigures


def stand_in_reads(tokens: int) -> list[tuple[int, bytes]]:
    """The stand-in's answer body, de-chunked, one read per event, as ``backends.h1`` keeps it."""
    reads = [(5000 + 2000 * i, event(i)) for i in range(tokens)]
    tail = LAST.split(b"\r\n")[1::2]  # the payloads of the last chunks
    last_us = reads[-1][0] + 500
    return reads + [(last_us, payload) for payload in tail if payload]


def evicted_cpu_s(run_once: Callable[[], object], calls: int, evict_bytes: int) -> float:
    """Thread CPU seconds of one ``run_once`` call made after a write to each 64-byte line of
    ``evict_bytes`` (not timed): the median of ``calls``, less the clock's own cost."""
    junk = bytearray(evict_bytes)
    ones = b"\x01" * len(junk[::64])
    clock = time.thread_time_ns
    empty = min(-clock() + clock() for _ in range(1000))  # two reads of the clock
    times = []
    for _ in range(calls):
        junk[::64] = ones
        t0 = clock()
        run_once()
        times.append(clock() - t0 - empty)
    return statistics.median(times) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--evict-mib", type=int, default=0, help="N MiB written before each call")
    args = parser.parse_args()
    reads = stand_in_reads(args.tokens)

    def fold() -> Measurement:
        return measure_recorded(
            Route.CHAT, True, status=200, headers_us=100, chunks=reads, end_us=reads[-1][0] + 1
        )

    m = fold()
    assert m.ok, m
    assert len(m.chunk_offsets_us) == args.tokens, m
    record = RequestRecord(
        experiment_id="exp-bench",
        request_id="r1",
        side=Role.BASELINE,
        route=Route.CHAT,
        stream=True,
        backend_url="http://127.0.0.1:30000",
        sent_at_unix_s=time.time(),
        actual_send_us=1000,
        measurement=m,
        mode=SendMode.PASSTHROUGH,
        in_flight_at_send=3,
        fingerprint="fp",
    )
    itl = m.itl_us
    figures = RunFigures()
    updates = MetricUpdates(ProxyMetrics())
    with tempfile.TemporaryDirectory(prefix="specproxy-record-") as tmp:
        log = LineLog(Path(tmp) / "specproxy.log", flush_s=3600.0, experiment_id="exp-bench")

        def log_line() -> None:
            log.info(
                "request_completed",
                side="baseline",
                fingerprint="fp",
                request_id="r1",
                pair_id=None,
                route="/v1/chat/completions",
                shadow=False,
                status=200,
                error_kind=None,
                ttft_us=m.ttft_us,
                e2e_us=m.e2e_us,
                completion_tokens=m.completion_tokens,
            )

        def add() -> None:
            figures.add(record, itl)

        def finished() -> None:
            updates.started(Role.BASELINE, shadow=False)
            updates.finished(Role.BASELINE, Route.CHAT, m, shadow=False, itl=itl)

        def line() -> bytes:
            return orjson.dumps(record.to_dict(), option=orjson.OPT_APPEND_NEWLINE)

        parts: list[tuple[str, Callable[[], object]]] = [
            ("fold", fold),
            ("RequestRecord.to_dict + dumps", line),
            ("RunFigures.add", add),
            ("MetricUpdates.finished", finished),
            ("LineLog.info", log_line),
        ]
        speedups = "C speedups" if SPEEDUPS is not None else "Python paths"
        how = f"best of {args.rounds} rounds of {args.repeat}"
        if args.evict_mib:
            how = f"median of {args.repeat} calls, each after writing {args.evict_mib} MiB"
        print(
            f"{args.tokens}-event chat stream (the stand-in's); {speedups}; µs of CPU per"
            f" request, {how}"
        )
        total = 0.0
        for name, call in parts:
            if args.evict_mib:
                us = evicted_cpu_s(call, args.repeat, args.evict_mib << 20) * 1e6
            else:
                us = best_cpu_s(call, args.repeat, args.rounds) * 1e6
            total += us
            print(f"  {name:<30} {us:7.1f}")
        print(f"  {'total':<30} {total:7.1f}")
        log.close()


if __name__ == "__main__":
    main()
