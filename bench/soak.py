"""Soak: mirror traffic through `specproxy serve` for a long time; is anything growing or lost?

Not a test: prints figures. Two simulated SGLang servers and the proxy (mirror mode,
recording into a temporary run directory), each its own process on loopback; this
process sends an open loop of requests at ``--rate`` per second (half streaming, half
not, short answers) for ``--minutes``. Every ``--sample-s`` seconds it samples the
proxy's resident memory (VmRSS), its open file descriptors (and how many are sockets)
and the records written so far; at the end it prints each sample, the least-squares
slope of RSS and open files per minute, the RSS change from the first to the last
sample, and the record count after SIGTERM against what was sent (one record per
request per side: lost = expected - written).

Open sockets are connection pools, not leaks: the proxy keeps its clients' keep-alive
connections and, per upstream, the connections its busiest moment needed (aiohttp
reuses the oldest idle one first, so at a steady load none idles out). So they follow
the peak number of requests in flight, which the soak prints, and they close once the
traffic stops: after the load it stops sending, closes its own connections, waits
``--idle-s`` (past aiohttp's 15 s keep-alive and its cleanup pass) and samples the open
files again.

    python bench/soak.py                        # 30 minutes at 200 req/s
    nice python bench/soak.py --minutes 2 --sample-s 15
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_overhead import PIDS, SIM_URL, process, serve

from specproxy.runtime import run, spawn

SIM = ["--decode-step-ms", "1", "--prefill-us-per-token", "0", "--contention", "0"]
MAX_IN_FLIGHT = 2000


@dataclass
class Load:
    """What the open loop did."""

    sent: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0  # not sent because MAX_IN_FLIGHT were still open (the host fell behind)
    peak_in_flight: int = 0
    unanswered: int = 0  # no HTTP answer at all (connection refused, reset, dropped)
    reasons: Counter[str] = field(default_factory=Counter)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def open_files(pid: int) -> tuple[int, int]:
    """Open file descriptors of ``pid``, and how many of them are sockets."""
    fds = os.listdir(f"/proc/{pid}/fd")
    sockets = 0
    for fd in fds:
        with contextlib.suppress(OSError):  # closed since the listing
            sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    return len(fds), sockets


def count_records(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as fh:
        return sum(1 for line in fh if line.endswith(b"\n"))


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute."""
    if len(points) < 2:
        return float("nan")
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    cov = sum((x - mx) * (y - my) for x, y in points)
    return 60 * cov / var if var else float("nan")


async def one(session: aiohttp.ClientSession, url: str, body: bytes, load: Load) -> None:
    status: int | None = None
    try:
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
            status = r.status
            await r.read()
    except aiohttp.ClientError as exc:
        load.failed += 1
        load.reasons[type(exc).__name__] += 1
        if status is None:  # no HTTP answer at all
            load.unanswered += 1
        return
    if status == 200:
        load.ok += 1
    else:
        load.failed += 1
        load.reasons[f"HTTP {status}"] += 1


async def open_loop(url: str, rate: float, seconds: float, load: Load) -> None:
    bodies = [
        orjson.dumps({"model": "m", "messages": [{"role": "user", "content": f"soak {i}"}],
                      "max_tokens": 16, "temperature": 0, "stream": i % 2 == 0})
        for i in range(2)
    ]  # fmt: skip
    connector = aiohttp.TCPConnector(limit=MAX_IN_FLIGHT)
    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.perf_counter()
        i = 0
        while (due := i / rate) < seconds:
            await asyncio.sleep(max(0.0, t0 + due - time.perf_counter()))
            i += 1
            if len(load.tasks) >= MAX_IN_FLIGHT:
                load.skipped += 1
                continue
            task = spawn(
                one(session, url + "/v1/chat/completions", bodies[i % 2], load), name="soak"
            )
            load.sent += 1
            load.tasks.add(task)
            task.add_done_callback(load.tasks.discard)
            load.peak_in_flight = max(load.peak_in_flight, len(load.tasks))
        if load.tasks:
            await asyncio.wait(set(load.tasks), timeout=60)


Point = tuple[float, float, int, int, int]  # seconds, RSS MB, open files, sockets, records


def take(pid: int, records: Path, t: float) -> Point:
    files, sockets = open_files(pid)
    point = (t, rss_mb(pid), files, sockets, count_records(records))
    print(f"  t={t:7.1f} s  rss={point[1]:7.1f} MB  open files={files:4d} (sockets {sockets:4d})"
          f"  records={point[4]}", flush=True)  # fmt: skip
    return point


async def sample(pid: int, records: Path, every_s: float, out: list[Point]) -> None:
    t0 = time.perf_counter()
    while True:
        out.append(take(pid, records, time.perf_counter() - t0))
        await asyncio.sleep(every_s)


async def soak(args: argparse.Namespace) -> None:
    base = tempfile.mkdtemp(prefix="specproxy-soak-")
    run_dir = Path(base) / "run"
    samples: list[Point] = []
    load = Load()
    async with (
        process(SIM_URL, "sim", "--port", "0", *SIM) as baseline,
        process(SIM_URL, "sim", "--port", "0", "--algorithm", "EAGLE", *SIM) as candidate,
    ):
        async with serve(str(run_dir), "--baseline", baseline, "--candidate", candidate,
                         "--mode", "mirror", "--drain-s", "10") as url:  # fmt: skip
            pid = PIDS[url]
            sampler = spawn(
                sample(pid, run_dir / "requests.jsonl", args.sample_s, samples), name="sampler"
            )
            await open_loop(url, args.rate, args.minutes * 60, load)
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
            samples.append(take(pid, run_dir / "requests.jsonl", samples[-1][0] + 0.0))
            print(f"  idle for {args.idle_s:g} s (no traffic, the soak's connections closed)")
            await asyncio.sleep(args.idle_s)
            idle = take(pid, run_dir / "requests.jsonl", samples[-1][0] + args.idle_s)
        written = count_records(run_dir / "requests.jsonl")  # after SIGTERM's drain and flush
    report(args, load, samples, idle, written, run_dir)


def report(
    args: argparse.Namespace,
    load: Load,
    samples: list[Point],
    idle: Point,
    written: int,
    run_dir: Path,
) -> None:
    half = [p for p in samples if p[0] >= samples[-1][0] / 2]
    first, last = samples[0][1], samples[-1][1]
    mid = half[0][1]
    answered = load.sent - load.unanswered
    expected = 2 * answered
    reasons = ", ".join(f"{k} {v}" for k, v in load.reasons.most_common()) or "none"
    print(f"\nsoak: {args.minutes:g} min at {args.rate:g} req/s, mirror; run dir {run_dir}")
    print(f"requests: sent {load.sent}, ok {load.ok}, failed {load.failed} ({reasons}),"
          f" never answered {load.unanswered}, not sent (host behind) {load.skipped}")  # fmt: skip
    for name, pts in (("whole run", samples), ("second half", half)):
        rss = [(t, r) for t, r, *_ in pts]
        fds = [(t, float(f)) for t, _, f, *_ in pts]
        print(f"{name}: rss slope {slope_per_min(rss):+.2f} MB/min, open files slope"
              f" {slope_per_min(fds):+.1f} /min")  # fmt: skip
    low, high = min(p[1] for p in half), max(p[1] for p in half)
    print(f"rss: first {first:.1f} MB, at half time {mid:.1f} MB, last {last:.1f} MB"
          f" ({100 * (last - mid) / mid:+.1f}% over the second half; its samples within"
          f" {low:.1f}..{high:.1f} MB, {100 * (high - low) / low:.1f}% apart)")  # fmt: skip
    print(f"open files: first {samples[0][2]}, at half time {half[0][2]}, last {samples[-1][2]}"
          f" ({samples[-1][3]} sockets); after {args.idle_s:g} s idle {idle[2]}"
          f" ({idle[3]} sockets); peak requests in flight {load.peak_in_flight}")  # fmt: skip
    print(f"records: expected {expected} (2 per answered request), written {written},"
          f" lost {expected - written}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second")
    parser.add_argument("--sample-s", type=float, default=60.0, help="seconds between samples")
    parser.add_argument(
        "--idle-s", type=float, default=40.0, help="seconds idle before the last open-files count"
    )
    run(soak(parser.parse_args()))


if __name__ == "__main__":
    main()
