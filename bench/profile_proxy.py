"""cProfile of ``specproxy serve`` under streaming load, with per-request costs of its layers.

Not a test: prints figures. The proxy (``--kind openai``, passthrough or mirror) runs
under ``python -m cProfile`` in front of the calibrated stand-in upstream
(``bench/standin_upstream.py``); this process drives N closed-loop streams for a few
seconds, then stops the proxy with SIGTERM so that cProfile writes its file. Printed:
the cumulative time per completed request of the hot path's layers, then the top
functions by own time. cProfile inflates per-call costs: compare runs with each other,
not with the benchmark's CPU figures.

Usage: ``python bench/profile_proxy.py [--mode passthrough|mirror] [--streams 16]
[--seconds 8] [--out proxy.prof]``.
"""

from __future__ import annotations

import argparse
import pstats
import sys
import tempfile
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from beside_nginx import standin
from proxy_overhead import PROXY_URL, Samples, closed_loop, launch

from specproxy.runtime import run

LAYERS = (
    ("web_protocol.py", "_handle_request"),
    ("relay.py", "_exchange"),
    ("h1.py", "data_received"),
    ("client_answer.py", "__call__"),
    ("measure.py", "measure_recorded"),
    ("recorder.py", "write"),
    ("recorder.py", "_observe"),
    ("metrics.py", "finished"),
)


async def profile(args: argparse.Namespace) -> int:
    """Runs the load against the profiled proxy; returns the number of completed requests."""
    body = orjson.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
    )
    with tempfile.TemporaryDirectory(prefix="specproxy-profile-") as tmp:
        async with standin(args) as (up, _), standin(args) as (shadow, _):
            extra = (
                ["--mode", "passthrough"] if args.mode == "passthrough" else ["--candidate", shadow]
            )
            argv = (sys.executable, "-m", "cProfile", "-o", args.out, "-m", "specproxy", "serve")
            serve = (*argv, "--kind", "openai", "--port", "0", "--run-dir", f"{tmp}/run")
            samples = Samples()
            # launch() ends the proxy with SIGTERM: it drains the shadows, then cProfile writes
            connector = aiohttp.TCPConnector(limit=0)
            async with (
                launch(PROXY_URL, *serve, "--baseline", up, *extra) as (url, _),
                aiohttp.ClientSession(connector=connector) as session,
            ):
                path = url + "/v1/chat/completions"
                await closed_loop(session, path, body, args.streams, args.seconds, samples)
    print(f"{len(samples.e2e_us)} requests completed, {samples.failed} failed")
    return len(samples.e2e_us)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("passthrough", "mirror"), default="passthrough")
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--out", default="proxy.prof")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--ttft-ms", type=float, default=5.0)
    parser.add_argument("--token-ms", type=float, default=2.0)
    args = parser.parse_args()
    done = run(profile(args))
    stats = pstats.Stats(args.out)
    table = stats.stats  # type: ignore[attr-defined]  # pstats keeps it undeclared
    print("cumulative time per completed request (us, under cProfile):")
    for file, func in LAYERS:
        cum = sum(v[3] for k, v in table.items() if k[0].endswith(file) and k[2] == func)
        print(f"  {file + ':' + func:<34} {1e6 * cum / max(1, done):9.0f}")
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
