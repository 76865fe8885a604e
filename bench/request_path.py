"""Inside the proxy: from a client request's arrival to its upstream request's write.

Not a test: prints figures. The two parts of the added time to first token that the
proxy's own code decides:

- ``request``: ``LeanConnection.data_received`` entered with a request's bytes, to the
  primary's upstream request written: ``_Connection.write`` returned (in trees before it
  existed, ``_Connection.start``, which also arms the deadline timer after its write, a
  few microseconds more); the shadow copy's write, later, is not counted;
- ``1st read``: the upstream connection's ``data_received`` entered with an answer's first
  body read, to its return, the read written to the client (first reads that came with the
  headers, before the client's answer began, are not counted).

The proxy runs as its own process (``specproxy serve --kind openai`` in passthrough) with
those methods wrapped, against the calibrated stand-in of ``bench/beside_nginx.py``, under
closed-loop load from this process; it writes what it measured when it stops.

``--against TREE`` measures another checkout of specproxy as well (its package first on
the path), in alternating blocks, so that two revisions are compared on the same machine
at the same time. The wrappers cost both the same.

Usage: ``python bench/request_path.py [--concurrency 1 16] [--seconds 6] [--rounds 2]
[--against TREE]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from beside_nginx import chat_body, revision, standin
from proxy_overhead import PROXY_URL, Samples, closed_loop, launch

from specproxy.runtime import run

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]


def probed_serve(out: str, argv: list[str]) -> None:
    """Run ``specproxy ARGV`` in this process with the two methods wrapped; the arrival to
    write times (ns) go to ``out``, one per line, when it exits."""
    import atexit

    from specproxy.backends import h1
    from specproxy.cli import main as cli_main
    from specproxy.proxy import lean

    clock = time.perf_counter_ns
    arrived = [0]
    spans: list[int] = []
    firsts: list[int] = []
    received = lean.LeanConnection.data_received
    # the method that writes the upstream request: ``write`` where the tree has one
    # (``start`` calls it), else ``start``
    writes = "write" if hasattr(h1._Connection, "write") else "start"
    start = getattr(h1._Connection, writes)
    upstream_read = h1._Connection.data_received

    def data_received(self: lean.LeanConnection, data: bytes) -> None:
        arrived[0] = clock()
        received(self, data)

    go = Path(out + ".go")  # made by the load generator once the warm-up is over
    measuring = [False]

    def started(self: h1._Connection, *args: object) -> None:
        start(self, *args)
        if arrived[0]:
            span = clock() - arrived[0]
            arrived[0] = 0
            if measuring[0] or go.exists():  # a look per request during the warm-up only
                measuring[0] = True
                spans.append(span)

    def read(self: h1._Connection, data: bytes) -> None:
        """The first body read of an answer that is being forwarded: to its client write."""
        t0 = clock()
        ex = self.exchange
        first = ex is not None and not ex.chunks and ex.on_body is not None
        upstream_read(self, data)
        if first and measuring[0]:
            firsts.append(clock() - t0)

    def dump() -> None:
        Path(out).write_text(" ".join(map(str, spans)) + "\n" + " ".join(map(str, firsts)) + "\n")

    lean.LeanConnection.data_received = data_received  # type: ignore[method-assign]
    setattr(h1._Connection, writes, started)
    h1._Connection.data_received = read  # type: ignore[method-assign]
    atexit.register(dump)
    cli_main(argv)


async def block(
    tree: Path | None, concurrency: int, args: argparse.Namespace
) -> tuple[list[int], list[int]]:
    """One block: a fresh probed proxy from ``tree`` (this checkout when None), loaded at
    ``concurrency`` for ``args.seconds``; returns its spans in microseconds (``_spans_us``)."""
    env = {**os.environ, "PYTHONPATH": str(tree)} if tree is not None else None
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/spans.txt"
        async with standin(args) as (upstream, _):
            argv = (sys.executable, "-P", str(HERE), "--probe", out, "--")
            serve = [*("serve", "--kind", "openai", "--port", "0", "--mode", "passthrough")]
            serve += ["--run-dir", f"{tmp}/run", "--baseline", upstream]
            async with (
                launch(PROXY_URL, *argv, *serve, env=env) as (url, _),
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
            ):
                target = url + "/v1/chat/completions"
                body = chat_body(args.tokens)
                await closed_loop(session, target, body, concurrency, 1.0, Samples())  # warm
                _touch(out + ".go")
                await closed_loop(session, target, body, concurrency, args.seconds, Samples())
        # the proxy has stopped (SIGTERM, a clean exit): its spans are written
        return _spans_us(out)


def _touch(path: str) -> None:
    Path(path).touch()


def _spans_us(path: str) -> tuple[list[int], list[int]]:
    """(arrival to upstream write, first forwarded read to its client write), in us."""
    requests, firsts = Path(path).read_text().split("\n")[:2]
    return [int(t) // 1000 for t in requests.split()], [int(t) // 1000 for t in firsts.split()]


def describe(spans: list[int]) -> str:
    if not spans:
        return "no requests"
    ordered = sorted(spans)

    def pct(q: float) -> int:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    mean = statistics.fmean(ordered)
    return f"n={len(ordered):6d}  p50={pct(0.5):5d}  p90={pct(0.9):5d}  mean={mean:7.1f}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--ttft-ms", type=float, default=5.0)
    parser.add_argument("--token-ms", type=float, default=2.0)
    parser.add_argument("--against", type=Path, default=None, help="another checkout")
    args = parser.parse_args()
    trees: dict[str, Path | None] = {revision(ROOT): None}
    if args.against is not None:
        trees[revision(args.against) + " (--against)"] = args.against.resolve()
    print(
        f"arrival (LeanConnection.data_received) to upstream write (_Connection.write), us;"
        f" stand-in {args.ttft_ms:g} ms TTFT, {args.token_ms:g} ms/token, {args.tokens}"
        f" tokens; {args.rounds} rounds x {args.seconds:g} s per tree; os.cpu_count() ="
        f" {os.cpu_count()}",
        flush=True,
    )
    for concurrency in args.concurrency:
        spans: dict[str, list[int]] = {name: [] for name in trees}
        firsts: dict[str, list[int]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                requests, reads = await block(tree, concurrency, args)
                spans[name] += requests
                firsts[name] += reads
        for name in trees:
            print(f"{concurrency:3d} streams  {name:<24} request {describe(spans[name])}")
            print(f"{'':11}  {'':<24} 1st read {describe(firsts[name])}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--probe":
        probed_serve(sys.argv[2], sys.argv[4:])
    else:
        run(main())
