"""CPU cost of a record inside a live proxy under load, beside the same parts in a tight loop.

Not a test: prints figures. The proxy (``specproxy serve --kind openai``, passthrough, or
mirror with ``--mirror``) runs as its own process against the calibrated stand-in of
``bench/beside_nginx.py``, under closed-loop load from this process, with the record's two
steps wrapped and timed in the thread's CPU time (``time.thread_time_ns``, less the
clock's own cost), so that time spent waiting for a core on a shared machine is not
counted:

- ``fold``: ``Relay._measure``, the response folded into its Measurement;
- ``record``: ``Relay._record``, the rest (metrics, the recorder's figures, the records
  file's line and its write, the run log's line).

It prints each step's median and mean per response (after the warm-up), and then what
``bench/record_speed.py`` gives for the same parts in a tight loop, warm and with its
caches evicted before each call, for comparison: the gap between a tight loop's figure
and a live one is the caches (other processes run between two records).

Usage: ``python bench/record_live.py [--concurrency 16] [--seconds 10] [--mirror]``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from beside_nginx import revision, standin, warmed_load
from proxy_overhead import PROXY_URL, Samples, closed_loop, launch

from specproxy.runtime import run

HERE = Path(__file__).resolve()
STEPS = {"fold": "_measure", "record": "_record"}


def probed_serve(out: str, argv: list[str]) -> None:
    """Run ``specproxy ARGV`` in this process with the record's steps wrapped; each step's
    CPU times (ns) go to ``out``, one line per step, when it exits."""
    import atexit

    from specproxy.cli import main as cli_main
    from specproxy.proxy import relay

    clock = time.thread_time_ns
    empty = min(-clock() + clock() for _ in range(1000))
    go = Path(out + ".go")  # made by the load generator once the warm-up is over
    times: dict[str, list[int]] = {name: [] for name in STEPS}
    measuring = [False]

    def timed(name: str, method: Callable[..., object]) -> Callable[..., object]:
        def step(*args: object, **kwargs: object) -> object:
            t0 = clock()
            try:
                return method(*args, **kwargs)
            finally:
                spent = clock() - t0 - empty
                if measuring[0] or go.exists():  # a look per step during the warm-up only
                    measuring[0] = True
                    times[name].append(spent)

        return step

    for name, attr in STEPS.items():
        setattr(relay.Relay, attr, timed(name, getattr(relay.Relay, attr)))

    def dump() -> None:
        Path(out).write_text("\n".join(" ".join(map(str, times[n])) for n in STEPS) + "\n")

    atexit.register(dump)
    cli_main(argv)


async def measure(args: argparse.Namespace) -> dict[str, list[int]]:
    """One probed proxy loaded at ``args.concurrency``; each step's CPU times in ns."""
    with tempfile.TemporaryDirectory(prefix="specproxy-record-live-") as tmp:
        out = f"{tmp}/steps.txt"
        async with contextlib.AsyncExitStack() as stack:
            upstream, _ = await stack.enter_async_context(standin(args))
            shadow, _ = await stack.enter_async_context(standin(args))
            mode = ("--candidate", shadow) if args.mirror else ("--mode", "passthrough")
            argv = (sys.executable, "-P", str(HERE), "--probe", out, "--")
            serve = ("serve", "--kind", "openai", "--port", "0", "--run-dir", f"{tmp}/run")
            launched = launch(PROXY_URL, *argv, *serve, "--baseline", upstream, *mode)
            url, _ = await stack.enter_async_context(launched)
            session, target, body = await warmed_load(stack, url, args)
            _touch(out + ".go")
            await closed_loop(session, target, body, args.concurrency, args.seconds, Samples())
        # the proxy has stopped (SIGTERM, a clean exit): its times are written
        return _read_times(out)


def _touch(path: str) -> None:
    Path(path).touch()


def _read_times(path: str) -> dict[str, list[int]]:
    lines = Path(path).read_text().split("\n")
    return {name: [int(t) for t in lines[i].split()] for i, name in enumerate(STEPS)}


async def main() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--mirror", action="store_true", help="mirror mode (two records each)")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--ttft-ms", type=float, default=5.0)
    parser.add_argument("--token-ms", type=float, default=2.0)
    args = parser.parse_args()
    times = await measure(args)
    mode = "mirror" if args.mirror else "passthrough"
    print(
        f"inside a live proxy ({mode}, {args.concurrency} streams, {revision(HERE.parents[1])}):"
        f" µs of thread CPU per response, stand-in {args.ttft_ms:g} ms TTFT,"
        f" {args.token_ms:g} ms/token, {args.tokens} tokens"
    )
    total = 0.0
    for name, ns in times.items():
        if not ns:
            print(f"  {name:<8} no responses")
            continue
        total += statistics.median(ns) / 1e3
        print(
            f"  {name:<8} n={len(ns):6d}  median={statistics.median(ns) / 1e3:7.1f}"
            f"  mean={statistics.fmean(ns) / 1e3:7.1f}"
        )
    print(f"  {'total':<8} {total:7.1f} (sum of medians)", flush=True)
    return args


def tight_loop(args: argparse.Namespace) -> None:
    """``bench/record_speed.py`` on the same stream, warm and then with evicted caches."""
    speed = [sys.executable, str(HERE.parent / "record_speed.py"), "--tokens", str(args.tokens)]
    subprocess.run([*speed, "--repeat", "1000", "--rounds", "5"], check=True)
    subprocess.run([*speed, "--repeat", "300", "--evict-mib", "8"], check=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--probe":
        probed_serve(sys.argv[2], sys.argv[4:])
    else:
        tight_loop(run(main()))
