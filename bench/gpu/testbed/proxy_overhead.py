# ruff: noqa: ASYNC230
# (a GPU-host script: it prints its progress; its two record files are opened once, up front)
"""Proxy overhead on real servers: E2E of streamed /generate requests, direct and through `specproxy serve`.

usage: python3 proxy_overhead.py PROMPTS.json RESULTS.jsonl RECORDS_DIR
           --arm direct=URL --arm passthrough=URL --arm mirror=URL [--arm ...]
           [--levels 1,16,64] [--rounds 9] [--output-len 64] [--deadline EPOCH_S]

First every prompt is sent once through the first arm (16 streams), so that every measured
request finds its prompt in the server's prefix cache whichever arm sends it first (without
this the arm that comes first in a round pays the prefill that the next arms skip). Per
concurrency level every arm then gets one warm-up block at that concurrency (not counted: new
connections, the mirror's first wider fan-out), and `rounds` rounds follow; each round runs one
block per arm, the arms' order rotating from round to round (interleaved blocks, so drift hits
every arm alike; with `rounds` a multiple of the arms, each arm has each place equally often).
A block is a closed loop of N requests at that concurrency (N = 4 at 1 stream, else 2 x
concurrency), each a streamed /generate with a fixed output length (`ignore_eos`, greedy), so
every arm generates the same tokens and E2E is comparable. It appends one JSON line per
(level, arm) to RESULTS: p50 E2E and TTFT over all rounds, each round's block p50, the
overhead against the direct arm in % of the direct E2E p50 (pooled over the rounds), and the
median of the per-round overheads (each round's block p50 against that round's direct block:
paired by round, so slow drift cancels); every request's timings (no text) go to
RECORDS_DIR/proxy_requests.jsonl.
A level that would not finish before --deadline (epoch seconds) is skipped and says so.
Standard library and aiohttp only.
"""

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any, TextIO

import aiohttp


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prompts")
    ap.add_argument("results")
    ap.add_argument("records_dir")
    ap.add_argument(
        "--arm", action="append", required=True, help="NAME=URL; the first is the reference"
    )
    ap.add_argument("--levels", default="1,16,64")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--deadline", type=float, default=0.0)
    a = ap.parse_args()
    a.arms = []
    for spec in a.arm:
        name, sep, url = spec.partition("=")
        if not sep or not url.startswith("http"):
            ap.error(f"--arm wants NAME=URL, got {spec!r}")
        a.arms.append((name, url.rstrip("/")))
    a.levels = [int(x) for x in a.levels.split(",") if x]
    return a


def load_prompts(path: str) -> list[str]:
    with open(path) as f:
        entries = json.load(f)
    return [next(t["value"] for t in e["conversations"] if t["from"] == "human") for e in entries]


async def one(session: aiohttp.ClientSession, url: str, prompt: str, n_out: int) -> dict[str, Any]:
    body = {
        "text": prompt,
        "stream": True,
        "sampling_params": {"max_new_tokens": n_out, "temperature": 0, "ignore_eos": True},
    }
    t0 = time.perf_counter()
    ttft = None
    events = 0
    status = None
    error = None
    try:
        async with session.post(url + "/generate", json=body) as resp:
            status = resp.status
            async for line in resp.content:
                if line.startswith(b"data:") and b"[DONE]" not in line:
                    events += 1
                    if ttft is None:
                        ttft = time.perf_counter() - t0
    except aiohttp.ClientError as exc:
        error = type(exc).__name__
    e2e = time.perf_counter() - t0
    return {
        "status": status,
        "error": error,
        "events": events,
        "ttft_ms": None if ttft is None else round(ttft * 1e3, 3),
        "e2e_ms": round(e2e * 1e3, 3),
    }


async def block(
    session: aiohttp.ClientSession, url: str, prompts: list[str], conc: int, n_out: int
) -> list[dict[str, Any]]:
    sem = asyncio.Semaphore(conc)

    async def go(i: int, p: str) -> dict[str, Any]:
        async with sem:
            return {"i": i, **(await one(session, url, p, n_out))}

    return list(await asyncio.gather(*(go(i, p) for i, p in enumerate(prompts))))


def block_size(conc: int) -> int:
    return 4 if conc == 1 else 2 * conc


def level_guess_s(a: argparse.Namespace, conc: int) -> float:
    """Seconds one level takes (warm-up and rounds; 5.7B target, graphs on; rough)."""
    e2e_s = a.output_len * (0.0045 + 0.00005 * conc) + 0.03
    return float((a.rounds + 1) * len(a.arms) * (block_size(conc) / conc) * e2e_s + 2)


def p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


async def level(
    a: argparse.Namespace,
    session: aiohttp.ClientSession,
    prompts: list[str],
    conc: int,
    rec: TextIO,
) -> dict[str, dict[str, Any]]:
    n = block_size(conc)
    per_arm: dict[str, dict[str, Any]] = {
        name: {"e2e": [], "ttft": [], "blocks": [], "bad": 0} for name, _ in a.arms
    }
    for _name, url in a.arms:  # warm-up at this concurrency, not counted
        await block(session, url, prompts[:n], conc, a.output_len)
    for r in range(a.rounds):
        k = r % len(a.arms)
        order = a.arms[k:] + a.arms[:k]
        chunk = [prompts[(r * n + i) % len(prompts)] for i in range(n)]
        if r and a.deadline and time.time() > a.deadline:
            break
        for name, url in order:
            t0 = time.time()
            rows = await block(session, url, chunk, conc, a.output_len)
            ok = [x for x in rows if x["status"] == 200 and x["error"] is None and x["events"] > 0]
            arm = per_arm[name]
            arm["bad"] += len(rows) - len(ok)
            arm["e2e"] += [x["e2e_ms"] for x in ok]
            arm["ttft"] += [x["ttft_ms"] for x in ok if x["ttft_ms"] is not None]
            arm["blocks"].append(p50([x["e2e_ms"] for x in ok]))
            for x in rows:
                rec.write(
                    json.dumps(
                        {"level": conc, "round": r, "arm": name, "block_start": round(t0, 3), **x}
                    )
                    + "\n"
                )
    return per_arm


def summarize(
    a: argparse.Namespace, conc: int, per_arm: dict[str, dict[str, Any]], wall_s: float
) -> list[dict[str, Any]]:
    ref_name = a.arms[0][0]
    ref = p50(per_arm[ref_name]["e2e"])
    ref_blocks = per_arm[ref_name]["blocks"]
    out = []
    for name, _ in a.arms:
        arm = per_arm[name]
        e2e = p50(arm["e2e"])
        over = None if e2e is None or not ref else round((e2e / ref - 1) * 100, 3)
        diffs = [
            round((b / rb - 1) * 100, 3)
            for b, rb in zip(arm["blocks"], ref_blocks, strict=False)
            if b and rb
        ]
        out.append(
            {
                "kind": "proxy",
                "level": conc,
                "arm": name,
                "requests": len(arm["e2e"]),
                "failed": arm["bad"],
                "e2e_p50_ms": e2e,
                "ttft_p50_ms": p50(arm["ttft"]),
                "block_e2e_p50_ms": arm["blocks"],
                "overhead_pct_of_direct_e2e_p50": over,
                "per_round_overhead_pct": diffs,
                "paired_overhead_pct_median": p50(diffs),
                "level_wall_s": round(wall_s, 2),
            }
        )
    return out


async def main() -> None:
    a = parse_args()
    prompts = load_prompts(a.prompts)
    os.makedirs(a.records_dir, exist_ok=True)
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    with (
        open(os.path.join(a.records_dir, "proxy_requests.jsonl"), "a") as rec,
        open(a.results, "a") as res,
    ):
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
            await block(session, a.arms[0][1], prompts, 16, a.output_len)  # prime the cache
            for _name, url in a.arms:
                await block(session, url, prompts[:8], 4, a.output_len)
            for conc in a.levels:
                guess = level_guess_s(a, conc)
                if a.deadline and time.time() + guess > a.deadline:
                    line = {
                        "kind": "skipped",
                        "step": "proxy",
                        "level": conc,
                        "why": "deadline",
                        "needed_s": round(guess, 1),
                        "left_s": round(a.deadline - time.time(), 1),
                    }
                    res.write(json.dumps(line) + "\n")
                    res.flush()
                    print(json.dumps(line), flush=True)
                    continue
                t0 = time.time()
                per_arm = await level(a, session, prompts, conc, rec)
                rec.flush()
                for line in summarize(a, conc, per_arm, time.time() - t0):
                    res.write(json.dumps(line) + "\n")
                    print(
                        f"proxy c={conc:<3} {line['arm']:<12} n={line['requests']:<4} E2E p50 "
                        f"{line['e2e_p50_ms']} ms, overhead {line['overhead_pct_of_direct_e2e_p50']}% "
                        f"(paired median {line['paired_overhead_pct_median']}; per round "
                        f"{line['per_round_overhead_pct']})",
                        flush=True,
                    )
                res.flush()


if __name__ == "__main__":
    asyncio.run(main())
