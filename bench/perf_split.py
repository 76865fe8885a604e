"""Where a proxy's CPU goes, by shared object (kernel, libpython, uvloop, ...), under load.

Not a test: prints figures. Needs Linux ``perf`` (Debian: ``linux-perf``) and the right to
profile one's own processes (``kernel.perf_event_paranoid`` <= 2). The target runs as its
own process against the calibrated stand-in of ``bench/beside_nginx.py`` under
closed-loop load from this process: ``specproxy serve --kind openai`` in passthrough or
mirror, or ``bench/tcp_relay.py`` (the bare uvloop relay, ``relay``; with a shadow,
``relay-mirror``). After a second of warm-up, ``perf record -F 2000 -p PID`` samples it
for ``--seconds``; the shares of its samples per shared object are printed, with the
requests the load completed meanwhile.

Usage: ``python bench/perf_split.py [--target passthrough|mirror|relay|relay-mirror]
[--concurrency 16] [--seconds 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from beside_nginx import revision, serve, standin, tcp_relay, warmed_load
from proxy_overhead import Samples, closed_loop

from specproxy.runtime import run

HERE = Path(__file__).resolve()
TARGETS = ("passthrough", "mirror", "relay", "relay-mirror")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=TARGETS, default="passthrough")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--ttft-ms", type=float, default=5.0)
    parser.add_argument("--token-ms", type=float, default=2.0)
    args = parser.parse_args()
    perf = shutil.which("perf")
    if perf is None:
        sys.exit("perf is missing (Debian: apt-get install linux-perf)")
    with tempfile.TemporaryDirectory(prefix="specproxy-perf-") as tmp:
        data = f"{tmp}/perf.data"
        async with contextlib.AsyncExitStack() as stack:
            upstream, _ = await stack.enter_async_context(standin(args))
            shadow, _ = await stack.enter_async_context(standin(args))
            started: contextlib.AbstractAsyncContextManager[tuple[str, int]]
            if args.target == "relay":
                started = tcp_relay(upstream)
            elif args.target == "relay-mirror":
                started = tcp_relay(upstream, shadow)
            else:
                mode = (
                    ("--candidate", shadow)
                    if args.target == "mirror"
                    else ("--mode", "passthrough")
                )
                started = serve(f"{tmp}/run", "--baseline", upstream, *mode)
            url, pid = await stack.enter_async_context(started)
            session, target, body = await warmed_load(stack, url, args)
            record = await asyncio.create_subprocess_exec(
                *(perf, "record", "-F", "2000", "-o", data, "-p", str(pid)),
                *("--", "sleep", f"{args.seconds:g}"),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            samples = Samples()
            await closed_loop(session, target, body, args.concurrency, args.seconds, samples)
            if await record.wait() != 0:
                sys.exit("perf record failed (is kernel.perf_event_paranoid above 2?)")
        report = await asyncio.create_subprocess_exec(
            *(perf, "report", "-i", data, "--sort", "dso", "--stdio"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await report.communicate()
    print(
        f"{args.target} at {args.concurrency} streams ({revision(HERE.parents[1])}):"
        f" {len(samples.e2e_us)} requests in {args.seconds:g} s; share of perf samples by object"
    )
    for line in out.decode().splitlines():
        if line.strip() and not line.startswith("#"):
            print(" ", line.strip())


if __name__ == "__main__":
    run(main())
