"""How much load `specproxy replay` can generate: send lag and achieved rate, concurrent streams.

Starts one simulated SGLang server in a separate process with zero step times, then:

1. open loop at 100, 500 and 2,000 requests/s (constant arrivals, ``--level-s`` seconds
   each, streaming ``/generate`` requests of 2 output tokens): send lag p50/p99/max from
   the records, and the achieved send rate against the target;
2. closed loop at increasing concurrency (streams of 32 tokens): the most concurrent
   streams held with no failure, and the send lag at each level;
3. the open-loop levels again against a null server (a separate process answering every
   ``/generate`` at once with a fixed two-token stream), which separates the load
   generator's own limits from the simulator's. The null server also measures what the
   server sees: each request's *arrival lag* (its arrival against the constant schedule,
   ``arrival - first arrival - i / rate``, less the smallest such value) and its own
   *timer lag* (how late a 1 ms sleep on its event loop wakes, sampled throughout: the
   CPU it is left with). The replayer's CPU time per request is its process's CPU time
   over the level (the replayer runs in this process).

Not a test: it prints figures. Usage (from the repository root):

    .venv/bin/python bench/replay_load.py [--level-s 5] [--streams 256,1024,4096]
        [--rates 100,500,2000] [--null-only] [--repeat N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specproxy.replay.config import ReplayConfig
from specproxy.replay.run import run_replay
from specproxy.runtime import run

RATES = (100.0, 500.0, 2000.0)
TIMER_S = 0.001  # the null server's timer-lag probe
OPEN_LOOP_OUTPUT_TOKENS = 2
CLOSED_LOOP_OUTPUT_TOKENS = 32


SIM_CMD = [
    sys.executable,
    "-m",
    "specproxy",
    "sim",
    "--port",
    "0",
    "--decode-step-ms",
    "0",
    "--verify-step-ms",
    "0",
    "--prefill-us-per-token",
    "0",
    "--contention",
    "0",
]
NULL_CMD = [sys.executable, __file__, "--serve-null"]
NULL_STREAM = (
    b"".join(
        b"data: " + json.dumps(event).encode() + b"\n\n"
        for event in (
            {
                "text": " a",
                "output_ids": [7],
                "meta_info": {
                    "id": "x",
                    "finish_reason": None,
                    "prompt_tokens": 8,
                    "completion_tokens": 1,
                },
            },
            {
                "text": " a b",
                "output_ids": [7, 8],
                "meta_info": {
                    "id": "x",
                    "finish_reason": {"type": "length", "length": 2},
                    "prompt_tokens": 8,
                    "completion_tokens": 2,
                    "cached_tokens": 0,
                    "e2e_latency": 0.0,
                },
            },
        )
    )
    + b"data: [DONE]\n\n"
)


async def serve_null() -> None:
    """The null server: /generate answers the fixed stream, /v1/models a one-model list,
    GET /stats the arrival times and timer lags since the last GET /stats (then cleared)."""
    from aiohttp import web

    arrivals: list[float] = []
    timer_lag_us: list[int] = []

    async def probe() -> None:
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(TIMER_S)
            timer_lag_us.append(int((time.perf_counter() - t0 - TIMER_S) * 1e6))

    async def stats(_request: web.Request) -> web.Response:
        out = {"arrivals": list(arrivals), "timer_lag_us": list(timer_lag_us)}
        arrivals.clear()
        timer_lag_us.clear()
        return web.json_response(out)

    async def generate(request: web.Request) -> web.StreamResponse:
        arrivals.append(time.perf_counter())
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(NULL_STREAM)
        await resp.write_eof()
        return resp

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "null", "object": "model"}]})

    app = web.Application()
    app.router.add_post("/generate", generate)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/stats", stats)
    prober = asyncio.get_running_loop().create_task(probe())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    print(f"null server at http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()
    prober.cancel()


@contextlib.contextmanager
def server(cmd: list[str]) -> Iterator[str]:
    """A server started by ``cmd`` in its own process; yields the URL it prints."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        url = line.strip().rsplit(" ", 1)[-1]
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"simulator did not start: {line!r}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def write_trace(path: Path, count: int, output_tokens: int) -> None:
    """``count`` identical short streaming /generate requests in the native format."""
    body = {
        "text": "one two three four five six seven eight",
        "stream": True,
        "sampling_params": {
            "max_new_tokens": output_tokens,
            "min_new_tokens": output_tokens,
            "ignore_eos": True,
            "temperature": 0,
        },
    }
    line = json.dumps({"t": 0, "route": "/generate", "body": body}) + "\n"
    path.write_text(line * count)


def records(run_dir: Path) -> list[dict[str, Any]]:
    with (run_dir / "requests.jsonl").open() as fh:
        return [json.loads(line) for line in fh]


def lag_ms(summary: dict[str, Any]) -> tuple[float, float, float]:
    """Send lag p50, p99 and max in milliseconds, from the run's own summary (baseline side)."""
    lag = summary["sides"]["baseline"]["send_lag_us"]
    return lag["p50"] / 1000, lag["p99"] / 1000, lag["max"] / 1000


def server_stats(url: str) -> dict[str, list[Any]]:
    """The null server's arrivals and timer lags since the last call (then cleared)."""
    with urllib.request.urlopen(f"{url}/stats", timeout=10) as resp:
        data: dict[str, list[Any]] = json.loads(resp.read())
        return data


def _rank(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ascending ``values``."""
    return values[max(0, min(len(values) - 1, int(q * len(values) + 0.5) - 1))]


def server_side(stats: dict[str, list[Any]], rate: float) -> str:
    """Arrival lag (against the constant schedule) and timer lag at the server, in ms."""
    arrivals = sorted(stats["arrivals"])
    late = [at - arrivals[0] - i / rate for i, at in enumerate(arrivals)]
    least = min(late)
    lag = sorted((x - least) * 1000 for x in late)
    timer = sorted(x / 1000 for x in stats["timer_lag_us"])
    return (
        f"  arrival lag p50 {_rank(lag, 0.5):6.3f} p99 {_rank(lag, 0.99):7.3f}"
        f" max {lag[-1]:8.3f} ms  server timer lag p99 {_rank(timer, 0.99):6.3f} ms"
    )


async def open_loop(
    url: str, rate: float, seconds: float, folder: Path, at_server: bool = False
) -> str:
    count = int(rate * seconds)
    name = f"open-{int(rate)}-{time.monotonic_ns()}"
    trace = folder / f"{name}.jsonl"
    write_trace(trace, count, OPEN_LOOP_OUTPUT_TOKENS)
    cfg = ReplayConfig(
        traces=(str(trace),),
        baseline=url,
        rate=rate,
        arrival="constant",
        snapshots=False,
        run_dir=str(folder / f"run-{name}"),
    )
    if at_server:
        server_stats(url)  # clears what came before
    cpu_s = time.process_time()
    outcome = await run_replay(cfg)
    cpu_us = (time.process_time() - cpu_s) / count * 1e6
    server = server_side(server_stats(url), rate) if at_server else ""
    rows = records(outcome.run_dir)
    p50, p99, worst = lag_ms(outcome.summary)
    sends = sorted(r["actual_send_us"] for r in rows)
    achieved = (len(sends) - 1) / ((sends[-1] - sends[0]) / 1e6)
    failed = sum(1 for r in rows if r["error_kind"])
    return (
        f"{rate:>7.0f} req/s  n={len(rows):>6}  lag p50 {p50:6.3f} ms"
        f"  p99 {p99:7.3f} ms  max {worst:8.3f} ms"
        f"  achieved {achieved:8.1f} req/s ({(achieved / rate - 1) * 100:+.2f}%)"
        f"  failed {failed}  replayer CPU {cpu_us:4.0f} us/request{server}"
    )


async def closed_loop(url: str, streams: int, seconds: float, folder: Path) -> tuple[bool, str]:
    trace = folder / f"closed-{streams}.jsonl"
    write_trace(trace, streams * 4, CLOSED_LOOP_OUTPUT_TOKENS)
    cfg = ReplayConfig(
        traces=(str(trace),),
        baseline=url,
        concurrency=streams,
        duration_s=seconds,
        snapshots=False,
        run_dir=str(folder / f"run-closed-{streams}"),
    )
    outcome = await run_replay(cfg)
    rows = records(outcome.run_dir)
    failed = sum(1 for r in rows if r["error_kind"])
    peak = max(r["in_flight_at_send"] for r in rows) + 1
    p50, p99, _ = lag_ms(outcome.summary)
    side = outcome.summary["sides"]["baseline"]
    held = failed == 0 and peak == streams
    return held, (
        f"{streams:>6} streams  requests {len(rows):>6}  peak in flight {peak:>6}"
        f"  failed {failed}  output {side['output_tokens_per_s']} tok/s"
        f"  lag p50 {p50:6.3f} ms p99 {p99:8.3f} ms"
    )


async def simulator_levels(
    level_s: float, streams: list[int], rates: list[float], repeat: int
) -> None:
    """The open and closed loops against the simulator."""
    with server(SIM_CMD) as url, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"simulator {url} (separate process, zero step times)")
        print("open loop, constant arrivals, streaming /generate, 2 output tokens:")
        for rate in rates:
            for _ in range(repeat):
                print("  " + await open_loop(url, rate, level_s, folder), flush=True)
        print(
            f"closed loop, streams of {CLOSED_LOOP_OUTPUT_TOKENS} tokens,"
            f" {level_s:g} s of sending per level:"
        )
        best = 0
        for n in streams:
            held, line = await closed_loop(url, n, level_s, folder)
            print("  " + line, flush=True)
            if held:
                best = n
        print(f"most concurrent streams held with no failure: {best}")


async def main(
    level_s: float, streams: list[int], rates: list[float], repeat: int, null_only: bool
) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average before the run: {load}")
    if not null_only:
        await simulator_levels(level_s, streams, rates, repeat)
    with server(NULL_CMD) as url, tempfile.TemporaryDirectory() as tmp:
        print(f"null server {url} (separate process, fixed two-token stream):")
        for rate in rates:
            for _ in range(repeat):
                line = await open_loop(url, rate, level_s, Path(tmp), at_server=True)
                load = " ".join(f"{x:.2f}" for x in os.getloadavg())
                print(f"  {line}  (load {load})", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level-s", type=float, default=5.0)
    parser.add_argument("--streams", default="256,1024,4096")
    parser.add_argument("--rates", default=",".join(f"{r:g}" for r in RATES))
    parser.add_argument("--repeat", type=int, default=1, help="Runs of each open-loop level.")
    parser.add_argument("--null-only", action="store_true", help="Only the null server's levels.")
    parser.add_argument("--serve-null", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_null:
        run(serve_null())
    else:
        streams = [int(s) for s in args.streams.split(",")]
        rates = [float(r) for r in args.rates.split(",")]
        run(main(args.level_s, streams, rates, args.repeat, args.null_only))
