"""Fuzz the SSE decoder, the protocol interpreter and every trace reader; count crashes.

Targets and their contracts are ``specproxy/testing/fuzz_targets.py``'s (the Hypothesis tests
use the same ones). Inputs, from one seeded generator per worker:

- ``sse`` and ``protocol``: a slice (up to 4 KB) of a real capture from
  ``tests/fixtures`` (SGLang 0.5.16 on every route, llama.cpp streams), mutated half of
  the time (bytes flipped, SSE tokens inserted, ranges deleted or repeated, two captures
  spliced), cut at up to 16 random places; ``protocol`` also picks a route, stream flag
  and status (200, 400 or 500) per input, and for 30% of its inputs builds the events
  instead from the protocol's field names holding JSON values of any shape;
- ``native``, ``mooncake``, ``azure``, ``sharegpt``, ``prompts``: one to four lines of
  the bundled trace of that format (``traces/``), each mutated: a value replaced by
  Infinity, NaN, 1e308, -1, 2**70, a string, null, a list...; a key removed; the line
  cut; or bytes flipped.

A crash is any exception a target raises (an uncaught exception of the code under
test, or a broken invariant); each distinct one is printed with a reproducer. Exit
status 1 when any target crashed.

Two more targets, not run unless named, go through real sockets
(``specproxy/testing/socket_fuzz.py``, whose short run is in the suite): ``socket-client``
(mutated raw requests to the proxy and to ``specproxy/testing/aiohttp_reference.py``,
what aiohttp's server answers to the same bytes, compared) and ``socket-upstream``
(mutated raw answers from a hostile upstream, through the proxy). A finding there is a
first status that differs from the reference's (client cases), a 500 from the proxy, a
hang, an error line in the log, or records that do not match the requests that reached
the upstream; each chunk of 1,000 cases runs against a fresh proxy (and reference).

    nice python bench/fuzz.py --count 20000            # a quick pass
    python bench/fuzz.py --count 1000000 --workers 16  # the full run
    nice python bench/fuzz.py --targets socket-client,socket-upstream --count 20000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from specproxy.core.records.model import Route
from specproxy.replay.trace import TraceFormat
from specproxy.testing import fuzz_targets as targets

TOKENS = [b"\n", b"\r", b"\r\n", b"\n\n", b"data:", b"data: ", b"[DONE]", b"{", b"}", b'"', b":",
          b"\xff", b"\xc3", b"event: error", b"id: 1", b'"choices"', b"null", b"1e999"]  # fmt: skip
ODD: list[object] = [float("inf"), float("-inf"), float("nan"), 1e308, -1e308, -1, 0, 2**70,
                     "", "x", "1", None, [], {}, True, [1, "a"], {"a": None}, 1.5]  # fmt: skip
CELLS = [
    "",
    "inf",
    "nan",
    "1e308",
    "-1",
    "x",
    "9" * 40,
    "2023-13-40 99:99:99",
    "2023-11-16 18:15:46.1",
]
TARGETS = ("sse", "protocol", *(f.value for f in TraceFormat))
SOCKET_TARGETS = ("socket-client", "socket-upstream")
SOCKET_CHUNK = 1000


def capture_input(rng: random.Random) -> tuple[bytes, list[int]]:
    bodies = targets.capture_bodies()
    body = rng.choice(bodies)
    start = rng.randrange(len(body)) if rng.random() < 0.7 else 0
    data = body[start : start + rng.randint(0, 4096)]
    if rng.random() < 0.5:
        data = targets.mutate(rng, data, TOKENS, rng.choice(bodies))
    cuts = [rng.randint(0, len(data)) for _ in range(rng.randint(0, 16))]
    return data, cuts


def odd_json(rng: random.Random, depth: int = 0) -> object:
    """A JSON value of any shape, with the protocol's field names as keys."""
    pick = rng.randrange(8 if depth < 3 else 5)
    if pick < 5:
        return rng.choice([None, True, 0, 1, -1, 2**40, 1.5, "", "x", "stop", "abort"])
    if pick == 5:
        return [odd_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = rng.sample(targets.PROTOCOL_KEYS, rng.randint(0, 4))
    return {k: odd_json(rng, depth + 1) for k in keys}


def structured_input(rng: random.Random) -> bytes:
    """SSE events (or one body) built from ``odd_json`` objects: right names, any values."""
    objects = []
    for _ in range(rng.randint(1, 5)):
        keys = rng.sample(targets.PROTOCOL_KEYS, rng.randint(1, 5))
        objects.append({k: odd_json(rng, 1) for k in keys})
    if rng.random() < 0.3:
        return json.dumps(objects[0]).encode()
    return targets.sse_body(objects, rng.random() < 0.5)


def mutate_line(rng: random.Random, fmt: TraceFormat, line: str) -> str:
    how = rng.randrange(5)
    if how == 0:
        return line[: rng.randint(0, len(line))]
    if how == 1:
        return targets.mutate(rng, line.encode(), TOKENS, b"").decode("utf-8", errors="replace")
    if fmt is TraceFormat.AZURE:
        cells = line.split(",")
        at = rng.randrange(len(cells))
        cells[at] = rng.choice(CELLS)
        return ",".join(cells[:at] if how == 2 else cells)
    obj = json.loads(line)
    if isinstance(obj, dict) and obj:
        key = rng.choice(sorted(obj))
        if how == 2:
            del obj[key]
        else:
            obj[key] = rng.choice(ODD)
    return json.dumps(obj)


def trace_input(rng: random.Random, fmt: TraceFormat) -> str:
    seeds = targets.trace_lines(fmt)
    lines = [mutate_line(rng, fmt, rng.choice(seeds)) for _ in range(rng.randint(1, 4))]
    if fmt is TraceFormat.AZURE and rng.random() < 0.9:
        lines.insert(0, seeds[0])  # the header, most of the time
    return "\n".join(lines) + rng.choice(["", "\n", "\r\n"])


def one_input(target: str, rng: random.Random) -> tuple[Callable[[], None], str]:
    """The call for one generated input of ``target``, and its reproducer."""
    if target in ("sse", "protocol"):
        data, cuts = capture_input(rng)
        if target == "protocol" and rng.random() < 0.3:
            data = structured_input(rng)
        if target == "sse":
            return (lambda: targets.check_sse(data, cuts)), f"check_sse({data!r}, {cuts})"
        case = [(rng.choice(list(Route)), rng.random() < 0.5)]
        status = rng.choice([200, 200, 200, 400, 500])
        return (
            lambda: targets.check_protocol(data, cuts, status, cases=case),
            f"check_protocol({data!r}, {cuts}, {status}, cases={case})",
        )
    fmt = TraceFormat(target)
    text = trace_input(rng, fmt)
    return (lambda: targets.check_reader(fmt, text)), f"check_reader({fmt}, {text!r})"


Share = tuple[str, int, float, dict[str, tuple[int, str]]]


def run_share(job: tuple[str, int, int]) -> Share:
    """Run ``count`` inputs of ``target`` from ``seed``; (target, count, seconds, crashes by kind)."""
    target, count, seed = job
    if target in SOCKET_TARGETS:
        return run_socket_share(target, count, seed)
    rng = random.Random(f"{target}:{seed}")
    t0 = time.perf_counter()
    crashes: dict[str, tuple[int, str]] = {}
    for _ in range(count):
        call, reproducer = one_input(target, rng)
        try:
            call()
        except Exception as exc:  # every exception is a finding; counted, not raised
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            key = f"{type(exc).__name__} at {Path(frame.filename).name}:{frame.lineno}"
            seen, first = crashes.get(key, (0, f"{exc!r}\n    {reproducer[:600]}"))
            crashes[key] = (seen + 1, first)
    return target, count, time.perf_counter() - t0, crashes


def run_socket_share(target: str, count: int, seed: int) -> Share:
    """``run_share`` for a socket target: chunks of ``SOCKET_CHUNK`` cases, fresh proxies each."""
    from specproxy.testing import socket_fuzz

    run = socket_fuzz.client_cases if target == "socket-client" else socket_fuzz.upstream_cases
    t0 = time.perf_counter()
    crashes: dict[str, tuple[int, str]] = {}
    done = 0
    while done < count:
        n = min(SOCKET_CHUNK, count - done)
        with tempfile.TemporaryDirectory() as tmp, socket_fuzz.counting_errors() as errors:
            tally = asyncio.run(run(Path(tmp), n, seed * 1_000_003 + done))
        found = {
            "status differs from the reference's": (len(tally.differ), repr(tally.differ[:1])),
            "500 from the proxy": (tally.proxy_500, tally.line()),
            "hang": (tally.hangs, tally.line()),
            "error line in the log": (errors.count, repr(errors.first)),
            "records != upstream requests": (
                int(tally.records != tally.upstream_requests),
                tally.line(),
            ),
        }
        for key, (seen, first) in found.items():
            if seen:
                before, kept = crashes.get(key, (0, f"{first[:600]} (seed {seed}, from {done})"))
                crashes[key] = (before + seen, kept)
        print(f"{target} {seed}:{done}: {tally.line()}", flush=True)
        done += n
    return target, count, time.perf_counter() - t0, crashes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="inputs per target")
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    chosen = [t for t in args.targets.split(",") if t]
    known = (*TARGETS, *SOCKET_TARGETS)
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(known)}")
    shares = max(1, args.workers) * 4
    jobs = []
    for target in chosen:
        per, extra = divmod(args.count, shares)
        jobs += [(target, per + (i < extra), args.seed * 1000 + i) for i in range(shares)]
    targets.capture_bodies()  # read the seeds once before forking
    t0 = time.perf_counter()
    totals: dict[str, int] = dict.fromkeys(chosen, 0)
    busy: dict[str, float] = dict.fromkeys(chosen, 0.0)
    found: dict[str, dict[str, tuple[int, str]]] = {t: {} for t in chosen}
    with multiprocessing.Pool(max(1, args.workers)) as pool:
        for target, count, seconds, crashes in pool.imap_unordered(run_share, jobs):
            totals[target] += count
            busy[target] += seconds
            for key, (n, first) in crashes.items():
                seen, kept = found[target].get(key, (0, first))
                found[target][key] = (seen + n, kept)
    elapsed = time.perf_counter() - t0
    print(f"fuzz: seed {args.seed}, {args.workers} workers, {elapsed:.1f} s")
    print(f"{'target':<10} {'inputs':>10} {'crashes':>8}  inputs per worker-second")
    for target in chosen:
        crashed = sum(n for n, _ in found[target].values())
        rate = totals[target] / busy[target] if busy[target] else 0.0
        print(f"{target:<10} {totals[target]:>10} {crashed:>8}  {rate:,.0f}")
    for target in chosen:
        for key, (n, first) in sorted(found[target].items()):
            print(f"\n{target}: {n} x {key}\n  {first}")
    return 1 if any(found[t] for t in chosen) else 0


if __name__ == "__main__":
    sys.exit(main())
