"""The latency `specproxy serve` adds, and what mirroring to a slow shadow costs the primary.

Not a test: prints figures. Every party is its own process, all on loopback:

- simulated SGLang servers with (almost) no latency (``specproxy sim``, one process each);
- the proxy (``specproxy serve``), recording into a temporary run directory as in
  production;
- this process, which drives closed-loop load (N concurrent streaming chat requests)
  and measures TTFT (first event with content) and E2E (``[DONE]`` read) per request.

Part 1, added latency: at each concurrency the same load runs directly against the
simulator and through a passthrough proxy, in alternating blocks (D P P D ...) so that
drift cancels; the figure is (through the proxy) - (direct) for p50 and p99.

Part 2, mirroring: a passthrough proxy and a mirror proxy whose shadow is a slow
simulator, in alternating blocks at one concurrency; the figure is the change of the
primary's p50 with mirroring on. Between blocks the mirror proxy's shadows are allowed
to finish, so they never run during a passthrough block.

Usage: ``python bench/proxy_overhead.py [--block-s 3] [--blocks 4] [--tokens 32]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

import aiohttp
import orjson

from specproxy.runtime import run, spawn

SIM_URL = re.compile(r" at (http://127\.0\.0\.1:\d+)")
PROXY_URL = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
CONTENT = re.compile(rb'"content":"[^"]')
FAST_SIM = ["--decode-step-ms", "0", "--prefill-us-per-token", "0", "--contention", "0"]
HEADERS = {"Content-Type": "application/json"}
PIDS: dict[str, int] = {}  # URL -> process id of the server announcing it


def cpu_s(pid: int) -> float:
    """User + system CPU seconds consumed so far by process ``pid`` (Linux)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Samples:
    """TTFT and E2E of completed requests, in microseconds."""

    ttft_us: list[int] = field(default_factory=list)
    e2e_us: list[int] = field(default_factory=list)
    failed: int = 0
    cpu_s: float = 0.0  # CPU of the measured process during this target's blocks
    block_ttft_p50_us: list[float] = field(default_factory=list)  # one per block (``alternate``)

    def pct(self, which: str, q: float) -> float:
        values = sorted(getattr(self, which))
        if not values:
            return float("nan")
        return float(values[min(len(values) - 1, int(q * len(values)))])


@contextlib.asynccontextmanager
async def launch(
    pattern: re.Pattern[str], *argv: str, env: Mapping[str, str] | None = None
) -> AsyncIterator[tuple[str, int]]:
    """Runs ``argv`` (in ``env``, else this process's environment); yields (the URL it
    announces on stderr or stdout, its process id)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    streams = [s for s in (proc.stdout, proc.stderr) if s is not None]
    drains: list[asyncio.Task[None]] = []
    try:
        url = await asyncio.wait_for(_announced(streams, pattern), 30)
        drains = [spawn(_drain(s), name="drain-output") for s in streams]
        yield url, proc.pid
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        for task in drains:
            task.cancel()


@contextlib.asynccontextmanager
async def process(pattern: re.Pattern[str], *args: str) -> AsyncIterator[str]:
    """``python -m specproxy ARGS``; yields the URL it announces (its pid goes in PIDS)."""
    async with launch(pattern, sys.executable, "-m", "specproxy", *args) as (url, pid):
        PIDS[url] = pid
        yield url


def serve(run_dir: str, *upstreams: str) -> contextlib.AbstractAsyncContextManager[str]:
    """``specproxy serve`` on a free port, recording into ``run_dir``; yields its URL."""
    return process(PROXY_URL, "serve", "--port", "0", "--run-dir", run_dir, *upstreams)


async def _announced(streams: list[asyncio.StreamReader], pattern: re.Pattern[str]) -> str:
    while True:
        for stream in streams:
            with contextlib.suppress(TimeoutError):
                line = await asyncio.wait_for(stream.readline(), 0.05)
                if match := pattern.search(line.decode()):
                    return match.group(1)


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


async def one_request(session: aiohttp.ClientSession, url: str, body: bytes, out: Samples) -> None:
    t0 = time.perf_counter_ns()
    ttft_ns = 0
    try:
        async with session.post(url, data=body, headers=HEADERS) as resp:
            tail = b""
            async for data in resp.content.iter_any():
                if not ttft_ns and CONTENT.search(data):
                    ttft_ns = time.perf_counter_ns()
                tail = data
            ok = resp.status == 200 and tail.endswith(b"data: [DONE]\n\n")
    except aiohttp.ClientError:
        ok = False
    end_ns = time.perf_counter_ns()
    if not ok or not ttft_ns:
        out.failed += 1
        return
    out.ttft_us.append((ttft_ns - t0) // 1000)
    out.e2e_us.append((end_ns - t0) // 1000)


async def closed_loop(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    concurrency: int,
    seconds: float,
    out: Samples,
) -> None:
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < stop_at:
            await one_request(session, url, body, out)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def wait_shadows_idle(session: aiohttp.ClientSession, proxy_url: str) -> None:
    """Poll the proxy's status until no shadow copy is in flight (at most 60 s)."""
    async with asyncio.timeout(60):
        while True:
            async with session.get(proxy_url + "/_specproxy/status") as resp:
                status = await resp.json()
            if status["shadow_in_flight"] == 0:
                return
            await asyncio.sleep(0.1)  # polling interval, not a wait for the event itself


async def alternate(
    session: aiohttp.ClientSession,
    targets: dict[str, str],
    body: bytes,
    concurrency: int,
    args: argparse.Namespace,
    idle: Mapping[str, str] | None = None,
    pids: dict[str, int] | None = None,
    *,
    rotate: bool = False,
    cpu: Callable[[int], float] | None = None,
) -> dict[str, Samples]:
    """Interleaved blocks of ``block_s`` each, after one short warm-up block per target.

    The order is A B B A ... (``rotate``: A B C, B C A, ... for more than two targets).
    ``idle`` maps a target to a proxy URL whose shadow copies are waited for after each
    of that target's blocks, so that their work counts in the block. CPU seconds of
    ``pids[name]`` are read with ``cpu`` (default ``cpu_s``).
    """
    read_cpu = cpu or cpu_s
    idle = idle or {}
    names = list(targets)
    for name in names:
        await closed_loop(session, targets[name], body, concurrency, 0.5, Samples())
    for url in set(idle.values()):
        await wait_shadows_idle(session, url)
    results = {name: Samples() for name in names}
    for block in range(args.blocks):
        if rotate:
            shift = block % len(names)
            order = names[shift:] + names[:shift]
        else:
            order = names if block % 2 == 0 else names[::-1]
        for name in order:
            pid = (pids or {}).get(name)
            before = read_cpu(pid) if pid else 0.0
            first = len(results[name].ttft_us)
            await closed_loop(
                session, targets[name], body, concurrency, args.block_s, results[name]
            )
            this_block = Samples(ttft_us=results[name].ttft_us[first:])
            results[name].block_ttft_p50_us.append(this_block.pct("ttft_us", 0.5))
            if name in idle:
                await wait_shadows_idle(session, idle[name])
            if pid:
                results[name].cpu_s += read_cpu(pid) - before
    return results


def _ms(us: float) -> str:
    return f"{us / 1000:8.3f}"


def report_overhead(concurrency: int, direct: Samples, proxied: Samples, cpu_us: float) -> None:
    row = [f"{concurrency:>5}", f"{len(direct.e2e_us):>7}", f"{len(proxied.e2e_us):>7}"]
    row += [
        _ms(proxied.pct(which, q) - direct.pct(which, q))
        for which in ("ttft_us", "e2e_us")
        for q in (0.5, 0.99)
    ]
    row += [
        _ms(direct.pct("e2e_us", 0.5)),
        f"{cpu_us:9.0f}",
        f"{direct.failed + proxied.failed:>5}",
    ]
    print(" ".join(row), flush=True)


async def part_overhead(args: argparse.Namespace, body: bytes, run_base: str) -> None:
    async with (
        process(SIM_URL, "sim", "--port", "0", *FAST_SIM) as sim,
        serve(f"{run_base}/overhead", "--baseline", sim, "--mode", "passthrough") as proxy,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        print("added latency = through the proxy - direct (ms)")
        print("(n: requests completed in the same total time; proxy CPU: us per proxied request)")
        print("conc.  n_dir  n_prox  ttft_p50 ttft_p99  e2e_p50  e2e_p99 dir_e2e50 proxy_cpu fails")
        for concurrency in args.concurrency:
            targets = {
                "direct": sim + "/v1/chat/completions",
                "proxy": proxy + "/v1/chat/completions",
            }
            res = await alternate(
                session, targets, body, concurrency, args, pids={"proxy": PIDS[proxy]}
            )
            per_request_us = 1e6 * res["proxy"].cpu_s / max(1, len(res["proxy"].e2e_us))
            report_overhead(concurrency, res["direct"], res["proxy"], per_request_us)


async def part_mirror(args: argparse.Namespace, body: bytes, run_base: str) -> None:
    slow = ("--decode-step-ms", "50", "--prefill-us-per-token", "0", "--contention", "0")
    async with (
        process(SIM_URL, "sim", "--port", "0", *FAST_SIM) as sim,
        process(SIM_URL, "sim", "--port", "0", *slow) as shadow,
        serve(f"{run_base}/off", "--baseline", sim, "--mode", "passthrough") as off,
        serve(f"{run_base}/on", "--baseline", sim, "--candidate", shadow, "--mode", "mirror") as on,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        targets = {"off": off + "/v1/chat/completions", "on": on + "/v1/chat/completions"}
        c = args.mirror_concurrency
        res = await alternate(session, targets, body, c, args, idle={"off": on, "on": on})
        async with session.get(on + "/_specproxy/status") as resp:
            status = await resp.json()
        cand = status["sides"]["candidate"]
        print(
            f"\nmirroring to a slow shadow (50 ms/step), {c} concurrent streams, primary latency (ms)"
        )
        print("mirror   n     ttft_p50 e2e_p50  ttft_p99 e2e_p99")
        for name in ("off", "on"):
            s = res[name]
            print(
                f"{name:<5} {len(s.e2e_us):>6} {_ms(s.pct('ttft_us', 0.5))} {_ms(s.pct('e2e_us', 0.5))}"
                f" {_ms(s.pct('ttft_us', 0.99))} {_ms(s.pct('e2e_us', 0.99))}"
            )
        for which in ("ttft_us", "e2e_us"):
            off_p50, on_p50 = res["off"].pct(which, 0.5), res["on"].pct(which, 0.5)
            print(
                f"p50 {which[:-3]} change with mirroring: {100 * (on_p50 - off_p50) / off_p50:+.2f}%"
            )
        print(
            f"shadows completed {cand['completed']}, dropped {cand['shadow_dropped']},"
            f" failed {cand['failed'] - cand['shadow_dropped']}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--block-s", type=float, default=3.0)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--mirror-concurrency", type=int, default=16)
    parser.add_argument("--skip-mirror", action="store_true")
    parser.add_argument(
        "--decode-step-ms",
        type=float,
        default=0.0,
        help="the primary simulator's decode step (0: negligible latency, CPU-bound load)",
    )
    args = parser.parse_args()
    FAST_SIM[1] = f"{args.decode_step_ms:g}"
    body = orjson.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Write about the sea."}],
            "max_tokens": args.tokens,
            "temperature": 0,
            "stream": True,
        }
    )
    with tempfile.TemporaryDirectory(prefix="specproxy-bench-") as run_base:
        await part_overhead(args, body, run_base)
        if not args.skip_mirror:
            await part_mirror(args, body, run_base)


if __name__ == "__main__":
    run(main())
