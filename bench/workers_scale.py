"""How `specproxy serve --workers N` scales: the sustainable stream rate for N = 1, 2, 4, 8.

Not a test: prints figures. Every party is its own process, all on loopback:

- the upstream: ``--upstreams`` calibrated stand-in processes (``bench/standin_upstream.py``
  on uvloop: ``--ttft-ms`` to the first event, then one event per ``--token-ms``,
  ``--tokens`` events of one token each, one chunk each) sharing one port with
  ``SO_REUSEPORT``, so that it has capacity to spare (its processes' CPU is printed: a
  value near 1.0 core would mean it, not the proxy, was the limit);
- the proxy: ``specproxy serve --workers N --kind openai --mode passthrough`` recording
  into a temporary run directory, as in production;
- the load: ``--loadgens`` processes (default: one per two proxy workers, at least two),
  each holding its share of the streams as closed loops on keep-alive connections with a
  minimal HTTP/1.1 client (an asyncio protocol, so the clients' own cost stays small),
  each stream a ``stream: true`` chat completion read to its last chunk.

**Sustainable stream rate** (the figure): completed ``--tokens``-chunk streams per second,
at saturation, over a ``--duration-s`` window that starts ``--warmup-s`` after the load.
Saturation means closed-loop load with ``--streams-per-worker`` concurrent streams per
proxy worker (default 384: at the stand-in's timing, 67 ms a stream, that offers about
5,700 streams/s per worker, well beyond what one worker completes (about 3,600 on the
16-core GPU host in December 2026; 192 no longer saturated one there), so every worker is
CPU-bound and its "proxy cores" column reads about N). The "of offered" column is the
rate over what the streams would complete with no proxy cost at all (streams / stream
time); above 0.8 the proxy kept up with the offered load, the point is not saturated,
and a warning says to raise ``--streams-per-worker``. A stream counts when its
``[DONE]`` arrives inside the window. The scaling ratio is rate(N) / rate(1); the
issue's aim is >= 0.8 N up to 8 on a 16-core host.

Also printed per N: TTFT p50/p99 as the clients saw it (queueing included: at saturation
it grows with the load), failed streams, the CPU cores used by the proxy (workers and
parent), by the busiest stand-in and by the busiest load generator during the window,
and how the requests fell over the workers (records per shard: ``SO_REUSEPORT`` hashes
connections, so the split is uneven; at saturation that does not cap the total).

Usage: ``python bench/workers_scale.py [--workers 1,2,4,8] [--duration-s 10]
[--warmup-s 2] [--streams-per-worker 384] [--upstreams 6] [--loadgens N] [--rounds 1]
[--json FILE]`` from the repository root. With the defaults, N = 1, 2, 4, 8 take about
two minutes. ``--rounds R`` repeats the whole set R times, alternating the order of N,
and reports each N's median.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

HERE = Path(__file__).resolve().parent
UPSTREAM_URL = re.compile(r"at http://127\.0\.0\.1:(\d+)")
PROXY_URL = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
WORKER_PIDS = re.compile(r'"pids":\[([0-9,]+)\]')
DONE_TAIL = b"0\r\n\r\n"


def cpu_s(pid: int) -> float:
    """User + system CPU seconds consumed so far by process ``pid`` (Linux)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the load generator (runs in its own process) -------------------------------------


class _Client(asyncio.Protocol):
    """One keep-alive connection; ``request`` sends one request and awaits its last chunk."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._future: asyncio.Future[tuple[bool, float, float]] | None = None
        self._head = b""
        self._in_body = False
        self._ttft = 0.0
        self._tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def request(self, raw: bytes) -> asyncio.Future[tuple[bool, float, float]]:
        assert self.transport is not None
        self._future = asyncio.get_running_loop().create_future()
        self._head, self._in_body, self._ttft, self._tail = b"", False, 0.0, b""
        self.transport.write(raw)
        return self._future

    def data_received(self, data: bytes) -> None:
        now = time.time()
        if not self._in_body:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                return
            if not self._head.startswith(b"HTTP/1.1 200"):
                self._finish(False, now)
                return
            self._in_body = True
            data = self._head[end + 4 :]
        if not self._ttft and b'"content":"' in data:
            self._ttft = now
        self._tail = (self._tail + data)[-64:]
        if self._tail.endswith(DONE_TAIL):
            self._finish(b"data: [DONE]" in self._tail and self._ttft > 0, now)

    def _finish(self, ok: bool, now: float) -> None:
        future, self._future = self._future, None
        if future is not None and not future.done():
            future.set_result((ok, self._ttft, now))
        if not ok and self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._finish(False, time.time())


@dataclass
class LoadResult:
    """What one load generator saw inside the window (times in microseconds)."""

    completed: int = 0
    failed: int = 0
    ttft_us: list[int] = field(default_factory=list)


async def _stream_loop(
    port: int, raw: bytes, window: tuple[float, float], out: LoadResult, stagger_s: float
) -> None:
    loop = asyncio.get_running_loop()
    start, end = window
    await asyncio.sleep(stagger_s)
    while time.time() < end:
        try:
            _, client = await loop.create_connection(_Client, "127.0.0.1", port)
        except OSError:
            out.failed += time.time() >= start
            await asyncio.sleep(0.01)
            continue
        while not client.closed and time.time() < end:
            t0 = time.time()
            ok, ttft, done = await client.request(raw)
            if not start <= done < end:
                continue
            if ok:
                out.completed += 1
                out.ttft_us.append(int((ttft - t0) * 1e6))
            else:
                out.failed += 1
        if client.transport is not None:
            client.transport.close()


def loadgen_main(port: int, streams: int, window: tuple[float, float], conn: Connection) -> None:
    """A load generator process: ``streams`` closed loops until the window ends."""
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    ).encode()
    raw = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    out = LoadResult()

    async def main() -> None:
        spread = 0.2  # connections are opened over this long, not all in one burst
        loops = (_stream_loop(port, raw, window, out, spread * i / streams) for i in range(streams))
        await asyncio.gather(*loops)

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
    conn.send(asdict(out))
    conn.close()


# --- the processes around it ---------------------------------------------------------


def _drain(stream: Any) -> None:
    for _ in iter(stream.readline, b""):
        pass


def _announced(proc: subprocess.Popen[bytes], pattern: re.Pattern[str], timeout_s: float) -> str:
    """Read ``proc``'s stderr (merged with stdout) until ``pattern`` matches; returns the
    text read so far, and leaves a thread draining the rest."""
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode(errors="replace")
        if not line:
            raise RuntimeError(f"{proc.args!r} exited before it listened:\n{''.join(seen)}")
        seen.append(line)
        if pattern.search(line):
            threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
            return "".join(seen)
    raise RuntimeError(f"{proc.args!r} did not listen within {timeout_s:g} s")


def _popen(*argv: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)


@contextlib.contextmanager
def upstreams(args: argparse.Namespace) -> Iterator[tuple[int, list[int]]]:
    """``args.upstreams`` stand-in processes on one port; yields (port, their pids)."""
    timing = ["--tokens", str(args.tokens), "--ttft-ms", str(args.ttft_ms)]
    timing += ["--token-ms", str(args.token_ms), "--reuse-port", "--uvloop"]
    script = str(HERE / "standin_upstream.py")
    procs = [_popen(sys.executable, script, "--port", "0", *timing)]
    try:
        port = int(UPSTREAM_URL.findall(_announced(procs[0], UPSTREAM_URL, 30))[-1])
        for _ in range(args.upstreams - 1):
            procs.append(_popen(sys.executable, script, "--port", str(port), *timing))
            _announced(procs[-1], UPSTREAM_URL, 30)
        yield port, [p.pid for p in procs]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


@dataclass
class Point:
    """One measured N."""

    workers: int
    streams: int
    loadgens: int
    rate_per_s: float
    completed: int
    failed: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    proxy_cores: float
    upstream_max_core: float
    loadgen_max_core: float
    records_per_worker: list[int]


def _records_per_worker(run_dir: Path, workers: int) -> list[int]:
    names = ["requests.jsonl"] if workers == 1 else [f"requests.w{k}.jsonl" for k in range(workers)]
    counts = []
    for name in names:
        path = run_dir / name
        counts.append(path.read_bytes().count(b"\n") if path.exists() else 0)
    return counts


def _pct(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


def measure(
    args: argparse.Namespace, n: int, upstream_port: int, upstream_pids: list[int]
) -> Point:
    """Serve with ``n`` workers, saturate them, and measure the window."""
    streams = args.streams_per_worker * n
    loadgens = args.loadgens or max(2, n // 2)
    with tempfile.TemporaryDirectory(prefix="specproxy-workers-scale-") as tmp:
        run_dir = Path(tmp) / "run"
        proxy = _popen(
            sys.executable, "-P", "-m", "specproxy", "serve", "--workers", str(n), "--kind", "openai",
            "--mode", "passthrough", "--baseline", f"http://127.0.0.1:{upstream_port}",
            "--port", "0", "--run-dir", str(run_dir), "--drain-s", "5",
        )  # fmt: skip
        try:
            text = _announced(proxy, PROXY_URL, 120)
            port = int(PROXY_URL.findall(text)[-1])
            found = WORKER_PIDS.findall(text)
            proxy_pids = (
                [proxy.pid, *(int(p) for p in found[-1].split(","))] if found else [proxy.pid]
            )
            start = time.time() + 1.0 + args.warmup_s  # 1 s for the load generators to start
            window = (start, start + args.duration_s)
            context = multiprocessing.get_context("spawn")
            gens = []
            for i in range(loadgens):
                share = streams // loadgens + (i < streams % loadgens)
                ours, theirs = context.Pipe(duplex=False)
                proc = context.Process(target=loadgen_main, args=(port, share, window, theirs))
                proc.start()
                theirs.close()
                gens.append((proc, ours))
            time.sleep(max(0.0, window[0] - time.time()))
            watched = {"proxy": proxy_pids, "upstream": upstream_pids}
            watched["loadgen"] = [p.pid for p, _ in gens if p.pid is not None]
            before = {k: [cpu_s(p) for p in pids] for k, pids in watched.items()}
            time.sleep(max(0.0, window[1] - time.time()))
            after = {k: [cpu_s(p) for p in pids] for k, pids in watched.items()}
            results = [conn.recv() for _, conn in gens]
            for proc, _ in gens:
                proc.join()
        finally:
            proxy.terminate()
            try:
                proxy.wait(timeout=180)
            except subprocess.TimeoutExpired:
                proxy.kill()
                proxy.wait()
        per_worker = _records_per_worker(run_dir, n)
    used = {
        k: [(a - b) / args.duration_s for a, b in zip(after[k], before[k], strict=True)]
        for k in after
    }
    ttft = [v for r in results for v in r["ttft_us"]]
    completed = sum(r["completed"] for r in results)
    return Point(
        workers=n,
        streams=streams,
        loadgens=loadgens,
        rate_per_s=completed / args.duration_s,
        completed=completed,
        failed=sum(r["failed"] for r in results),
        ttft_p50_ms=_pct(ttft, 0.5),
        ttft_p99_ms=_pct(ttft, 0.99),
        proxy_cores=sum(used["proxy"]),
        upstream_max_core=max(used["upstream"]),
        loadgen_max_core=max(used["loadgen"]),
        records_per_worker=per_worker,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workers", default="1,2,4,8", help="comma-separated N values")
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--streams-per-worker", type=int, default=384)
    parser.add_argument("--upstreams", type=int, default=6, help="stand-in processes")
    parser.add_argument("--loadgens", type=int, default=0, help="0: max(2, N // 2)")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--ttft-ms", type=float, default=5.0)
    parser.add_argument("--token-ms", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the figures and raw points here")
    args = parser.parse_args()
    ns = [int(v) for v in args.workers.split(",") if v.strip()]
    print(
        f"host: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; stand-in: "
        f"{args.upstreams} processes, {args.ttft_ms:g} ms TTFT, {args.token_ms:g} ms per token, "
        f"{args.tokens} chunks; {args.streams_per_worker} streams per worker; "
        f"{args.duration_s:g} s windows after {args.warmup_s:g} s warm-up",
        flush=True,
    )
    points: dict[int, list[Point]] = {n: [] for n in ns}
    with upstreams(args) as (upstream_port, upstream_pids):
        for r in range(args.rounds):
            for n in ns if r % 2 == 0 else list(reversed(ns)):
                point = measure(args, n, upstream_port, upstream_pids)
                points[n].append(point)
                print(
                    f"  round {r + 1} N={n}: {point.rate_per_s:.0f} streams/s"
                    f" ({point.failed} failed), proxy {point.proxy_cores:.2f} cores,"
                    f" records per worker {point.records_per_worker}",
                    flush=True,
                )
    rate = {n: statistics.median(p.rate_per_s for p in pts) for n, pts in points.items()}
    base = rate.get(1)
    print()
    print(
        "| workers | streams | streams/s | ratio to N=1 | ratio / N | of offered |"
        " TTFT p50 / p99 ms | failed | proxy cores | stand-in max core | load gen max core |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    summary = []
    stream_s = (args.ttft_ms + (args.tokens - 1) * args.token_ms) / 1000
    unsaturated = []
    for n, pts in points.items():
        last = pts[-1]
        ratio = rate[n] / base if base else math.nan
        offered = rate[n] / (last.streams / stream_s)
        if offered > 0.8:
            unsaturated.append(n)
        print(
            f"| {n} | {last.streams} | {rate[n]:.0f} | {ratio:.2f} | {ratio / n:.2f} |"
            f" {offered:.2f} | {last.ttft_p50_ms:.1f} / {last.ttft_p99_ms:.1f} | {last.failed} |"
            f" {last.proxy_cores:.2f} | {last.upstream_max_core:.2f} |"
            f" {last.loadgen_max_core:.2f} |"
        )
        summary.append(
            {
                "workers": n,
                "rate_per_s": rate[n],
                "ratio": ratio,
                "ratio_per_n": ratio / n,
                "of_offered": offered,
            }
        )
    busy = [
        n
        for n, pts in points.items()
        if max(p.upstream_max_core for p in pts) > 0.8 or max(p.loadgen_max_core for p in pts) > 0.8
    ]
    if busy:
        print(
            f"warning: at N={busy} a stand-in or load generator process used more than 0.8"
            " core: it may have been the limit; raise --upstreams or --loadgens"
        )
    if unsaturated:
        print(
            f"warning: N={unsaturated} kept up with the offered load (not saturated): their"
            " rate is the load's, not the proxy's; raise --streams-per-worker"
        )
    if args.json is not None:
        doc = {
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "summary": summary,
            "points": {str(n): [asdict(p) for p in pts] for n, pts in points.items()},
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
