"""The modules one proxied request runs through, from socket to record, traced.

Run from the repository root::

    .venv/bin/python -m tools.path [--calls] [--max N]

Starts the proxy in front of two simulated servers (SIMULATED upstreams, loopback only),
warms it up, then traces (``sys.settrace``) every call into the package while requests
are served and their records written: in mirror and passthrough mode, streamed and
unary, each once on a new connection with a request head not seen before (so the head
is parsed) and once on a kept-alive one, all with plain JSON bodies. Prints the modules
of the path's layers (``proxy/``, ``backends/``, ``recording/``) whose code ran, each
with the functions that ran, then the leaves it reached (``core/``: the pure fold;
``runtime``, ``log``), and, with ``--calls``, every call from one module to another.
With ``--max N`` it exits 1 when more than N path modules ran.

The simulator's and the test harness's own code are not counted: they stand in for the
upstreams and the client.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

PACKAGE = Path(__file__).resolve().parent.parent / "specproxy"
PATH_LAYERS = ("proxy/", "backends/", "recording/")
NOT_COUNTED = ("sim/", "testing/")


class Tracer:
    """Which package modules and functions run, and the calls between modules."""

    def __init__(self) -> None:
        self.functions: dict[str, set[str]] = collections.defaultdict(set)
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()
        self._root = str(PACKAGE) + "/"

    def module(self, frame: FrameType | None) -> str | None:
        """The package-relative file of ``frame``'s code, None outside what is counted."""
        if frame is None:
            return None
        name = frame.f_code.co_filename
        if not name.startswith(self._root):
            return None
        rel = name[len(self._root) :]
        return None if rel.startswith(NOT_COUNTED) else rel

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        """``sys.settrace``'s hook: counts each call (no line events: returns None)."""
        here = self.module(frame) if event == "call" else None
        if here is not None:
            self.functions[here].add(frame.f_code.co_qualname)
            caller = self.module(frame.f_back)
            if caller is not None and caller != here:
                self.calls[(caller, here)] += 1


async def _serve(tracer: Tracer, mode: str) -> None:
    from aiohttp import ClientSession

    from specproxy.sim.config import SimConfig
    from specproxy.testing.harness import chat, records_when, rig

    sim = SimConfig(decode_step_ms=0.2, prefill_us_per_token=1.0)
    per = 2 if mode == "mirror" else 1  # records per request
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        async with rig(run_dir, baseline=sim, candidate=sim, mode=mode) as r:
            url = r.url + "/v1/chat/completions"
            sent = 0
            for stream in (True, False, True, False):  # warm-up: pooled connections, imports
                async with r.session.post(url, json={**chat("warm"), "stream": stream}) as resp:
                    await resp.read()
                sent += 1
            await records_when(run_dir, sent * per)
            for stream in (True, False):
                body = {**chat("Say something about the sea."), "stream": stream}
                sys.settrace(tracer)
                try:
                    async with ClientSession() as fresh:  # a new connection, a new head
                        headers = {"x-trace-head": f"{mode}-{stream}"}
                        async with fresh.post(url, json=body, headers=headers) as resp:
                            await resp.read()
                    async with r.session.post(url, json=body) as resp:  # kept alive
                        await resp.read()
                    sent += 2
                    await records_when(run_dir, sent * per)
                finally:
                    sys.settrace(None)


def trace() -> Tracer:
    """The tracer after serving the requests of the module docstring."""
    tracer = Tracer()
    for mode in ("mirror", "passthrough"):
        asyncio.run(_serve(tracer, mode))
    return tracer


def path_modules(tracer: Tracer) -> list[str]:
    """The path's modules that ran, sorted."""
    return sorted(m for m in tracer.functions if m.startswith(PATH_LAYERS))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.path", description=__doc__)
    parser.add_argument("--calls", action="store_true", help="print the calls between modules")
    parser.add_argument("--max", type=int, default=None, help="exit 1 above this many modules")
    args = parser.parse_args(argv)
    tracer = trace()
    path = path_modules(tracer)
    out = sys.stdout
    for module in path:
        out.write(f"{module}: {', '.join(sorted(tracer.functions[module]))}\n")
    leaves = sorted(m for m in tracer.functions if m not in path)
    out.write(f"\n{len(path)} modules on the path; leaves reached: {', '.join(leaves)}\n")
    if args.calls:
        for (caller, callee), n in sorted(tracer.calls.items()):
            out.write(f"  {caller} -> {callee}  ({n})\n")
    return 1 if args.max is not None and len(path) > args.max else 0


if __name__ == "__main__":
    sys.exit(main())
