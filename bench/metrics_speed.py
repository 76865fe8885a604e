"""CPU cost of the proxy's live counters per request: ``MetricUpdates.started`` + ``finished``.

Not a test: prints figures. One request is a successful 32-event chat stream, one token
per event, 2 ms apart, with an accept length (as the relay reports it: ``itl`` passed in,
computed once per request). Each round calls ``started``/``finished`` ``--repeat`` times on
the ``proxy.records.MetricUpdates`` of one ``ProxyMetrics``; the figure is the best round's
CPU time (``time.process_time``) per request, so other work on a shared machine inflates it
as little as possible. With
``--multiprocess`` the counters live in prometheus_client's multiprocess files (what
``serve --workers N`` uses, N > 1), in a temporary directory.

Usage: ``python bench/metrics_speed.py [--repeat 2000] [--rounds 20] [--tokens 32]
[--multiprocess]`` from the repository root.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--multiprocess", action="store_true")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="specproxy-metrics-")
    if args.multiprocess:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder  # before prometheus_client is imported

    from specproxy.core.records.model import Acceptance, AcceptanceSource, Measurement, Role, Route
    from specproxy.proxy.metrics import ProxyMetrics
    from specproxy.proxy.records import MetricUpdates

    kwargs = {"multiprocess_dir": Path(folder)} if args.multiprocess else {}
    metrics = ProxyMetrics(**kwargs)
    updates = MetricUpdates(metrics)
    offsets = tuple(5000 + 2000 * i for i in range(args.tokens))
    m = Measurement(
        status=200,
        ttft_us=offsets[0],
        e2e_us=offsets[-1] + 500,
        tpot_us=2000,
        chunk_offsets_us=offsets,
        chunk_tokens=(1,) * args.tokens,
        completion_tokens=args.tokens,
        acceptance=Acceptance(AcceptanceSource.CHUNK_ESTIMATE, accept_length=1.0),
    )
    itl = m.itl_us
    best = float("inf")
    for _ in range(args.rounds):
        t0 = time.process_time()
        for _ in range(args.repeat):
            updates.started(Role.BASELINE, shadow=False)
            updates.finished(Role.BASELINE, Route.CHAT, m, shadow=False, itl=itl)
        best = min(best, (time.process_time() - t0) / args.repeat)
    t0 = time.process_time()
    text = metrics.render()
    render_ms = (time.process_time() - t0) * 1e3
    mode = "multiprocess" if args.multiprocess else "single process"
    print(
        f"MetricUpdates ({mode}), {args.tokens}-event stream: "
        f"{best * 1e6:.1f} µs CPU per request (started + finished, best of {args.rounds}"
        f" rounds of {args.repeat}); render {render_ms:.1f} ms, {len(text)} bytes"
    )


if __name__ == "__main__":
    main()
