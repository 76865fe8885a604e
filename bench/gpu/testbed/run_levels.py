# (a GPU-host script: it prints its progress and runs fixed commands: specproxy, tar)
"""The level loop: per candidate and concurrency, specproxy's alternate replay, then SGLang's bench_serving.

usage: python3 run_levels.py --baseline URL --server NAME=URL [--server ...] --plan NAME:1,4,16,64
           [--plan ...] --prompts PROMPTS.json --records DIR --results RESULTS.jsonl
           --tokenizer MODEL_DIR [--reps 3] [--output-len 64] [--deadline EPOCH_S]
           [--no-replay] [--no-bench] [--warmup] [--fresh-from K] [--tar OUT.tar.gz]
           [--declare KEY=VALUE ...]

For each plan entry NAME:LEVELS and each concurrency c in LEVELS, in the order given:
  1. the first n(c) prompts of PROMPTS (16 at c=1 and 2, 32 at 4, 32 at 8, 48 at 16, 64 at 32,
     128 at 64) are written to DIR/prompts/, so both tools send exactly the same texts;
  2. replay (skipped with --no-replay, e.g. when `specproxy sweep` does this part):
     `specproxy replay --mode alternate --concurrency c --block-size n/2`, greedy /generate with a
     fixed output length and `ignore_eos`, its own run directory DIR/replay/NAME-cC;
  3. ground truth (skipped with --no-bench): `python3 -m sglang.bench_serving` on each server
     alone, baseline then candidate, `--reps` times (ABAB...), same prompts, output length and
     `--max-concurrency c`. It runs in this process (one import of SGLang, not one per rep);
     each rep appends bench_serving's own JSON line to DIR/bench/NAME-cC.jsonl.
With --fresh-from K no prompt is sent twice to a server (for NGRAM, which learns from what it
has served): every replay and every bench_serving rep takes the next n(c) prompts of PROMPTS from
entry K on (one rep: the same prompts to the baseline and then to the candidate; the next rep:
new ones; 64 prompts at 64 streams instead of 128, to spare prompts), and a step the file has
no prompts left for is recorded as skipped.
One JSON line per step goes to RESULTS (kind replay / bench / skipped), flushed as it happens,
and with --tar the records directory is packed after every level, so a run cut short by its time
limit still returns everything finished. A level that would not end before --deadline (epoch
seconds, from a calibrated cost model) is skipped and recorded as skipped.
--warmup first sends every server 8 requests at 8 streams and 64 at 64 streams.
"""

import argparse
import asyncio
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from typing import Any

PROMPTS_PER_LEVEL = {1: 16, 2: 16, 4: 32, 8: 32, 16: 48, 32: 64, 64: 128}
FRESH_PER_LEVEL = {**PROMPTS_PER_LEVEL, 64: 64}  # --fresh-from: one wave at 64, to spare prompts


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--server", action="append", default=[], help="NAME=URL of a candidate")
    ap.add_argument(
        "--plan", action="append", default=[], help="NAME:LEVELS, e.g. standalone:1,4,16,64"
    )
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--records", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--deadline", type=float, default=0.0)
    ap.add_argument("--no-replay", action="store_true")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--warmup", action="store_true")
    ap.add_argument("--fresh-from", type=int, default=None)
    ap.add_argument("--tar")
    ap.add_argument("--declare", action="append", default=[])
    a = ap.parse_args()
    a.servers = {}
    for spec in a.server:
        name, sep, url = spec.partition("=")
        if not sep or not url.startswith("http"):
            ap.error(f"--server wants NAME=URL, got {spec!r}")
        a.servers[name] = url.rstrip("/")
    a.steps = []
    for spec in a.plan:
        name, sep, levels = spec.partition(":")
        if name not in a.servers:
            ap.error(f"--plan {spec!r}: no --server named {name!r}")
        try:
            cs = [int(x) for x in levels.split(",") if x]
        except ValueError:
            ap.error(f"--plan {spec!r}: levels must be integers")
        bad = [c for c in cs if c not in PROMPTS_PER_LEVEL]
        if not sep or not cs or bad:
            ap.error(f"--plan {spec!r}: levels from {sorted(PROMPTS_PER_LEVEL)}")
        a.steps += [(name, c) for c in cs]
    a.baseline = a.baseline.rstrip("/")
    return a


class Log:
    """RESULTS lines, flushed at once, echoed to stdout."""

    def __init__(self, path: str) -> None:
        self.f = open(path, "a")  # noqa: SIM115 - kept open for the whole run, flushed per line

    def write(self, line: dict[str, Any], echo: str | None = None) -> None:
        self.f.write(json.dumps(line) + "\n")
        self.f.flush()
        print(echo or json.dumps(line), flush=True)


def prompts_file(a: argparse.Namespace, n: int) -> str:
    os.makedirs(os.path.join(a.records, "prompts"), exist_ok=True)
    path = os.path.join(a.records, "prompts", f"prompts-{n}.json")
    if not os.path.isfile(path):
        with open(a.prompts) as f:
            entries = json.load(f)
        if len(entries) < n:
            sys.exit(f"{a.prompts} has {len(entries)} prompts, level needs {n}")
        with open(path, "w") as f:
            json.dump(entries[:n], f)
    return path


def fresh_file(a: argparse.Namespace, n: int) -> tuple[str, int] | None:
    """--fresh-from: a file of the next n unsent prompts and its first entry; None when used up."""
    start = a.fresh_next
    with open(a.prompts) as f:
        entries = json.load(f)
    if start + n > len(entries):
        return None
    a.fresh_next = start + n
    os.makedirs(os.path.join(a.records, "prompts"), exist_ok=True)
    path = os.path.join(a.records, "prompts", f"fresh-{start}-{n}.json")
    with open(path, "w") as f:
        json.dump(entries[start : start + n], f)
    return path, start


def predicted_side_s(c: int, n: int, out_len: int) -> float:
    """Seconds one server needs for n requests at c streams (5.7B target, graphs on; rough)."""
    waves = -(-n // c)
    return waves * out_len * (0.0045 + 0.00008 * c) + 0.3


def replay(a: argparse.Namespace, log: Log, name: str, c: int, *, path: str, n: int) -> None:
    run_dir = os.path.join(a.records, "replay", f"{name}-c{c}")
    cmd = [
        sys.executable,
        "-m",
        "specproxy",
        "replay",
        path,
        "--format",
        "sharegpt",
        "--baseline",
        a.baseline,
        "--candidate",
        a.servers[name],
        "--mode",
        "alternate",
        "--block-size",
        str(max(1, n // 2)),
        "--concurrency",
        str(c),
        "--warmup",
        "0",
        "--route",
        "generate",
        "--output-len",
        str(a.output_len),
        "--ignore-eos",
        "--no-output-len-from-reference",
        "--temperature",
        "0",
        "--run-dir",
        run_dir,
    ]
    for d in a.declare:
        cmd += ["--declare", d]
    left = a.deadline - time.time() if a.deadline else 600
    t0 = time.time()
    rc: int | str
    with open(run_dir + ".out", "w") as out:
        try:
            rc = subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, timeout=max(5, left), check=False
            ).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    line: dict[str, Any] = {
        "kind": "replay",
        "candidate": name,
        "level": c,
        "prompts": n,
        "rc": rc,
        "wall_s": round(time.time() - t0, 2),
        "run_dir": os.path.relpath(run_dir, a.records),
    }
    with contextlib.suppress(OSError, ValueError, KeyError):
        with open(os.path.join(run_dir, "experiment.json")) as f:
            summary = json.load(f)["summary"]
        for side in ("baseline", "candidate"):
            s = summary["sides"][side]
            line.setdefault("sides", {})[side] = {
                "completed": s.get("completed"),
                "failed": s.get("failed"),
                "e2e_p50_ms": (s.get("e2e_us") or {}).get("p50", 0) / 1e3,
                "accept_length": s.get("accept_length_mean"),
            }
    verdict = ""
    with contextlib.suppress(OSError), open(run_dir + ".out") as f:
        verdict = next((x.strip() for x in f if re.match(r"Verdict( \(SIMULATED\))?:", x)), "")
    log.write(line, f"replay {name} c={c}: rc={rc} in {line['wall_s']} s; {verdict}")


def bench_once(
    a: argparse.Namespace, url: str, c: int, *, path: str, n: int, out_file: str
) -> dict[str, Any] | None:
    """One bench_serving run against one server, in this process; its JSON line, or None."""
    from sglang.benchmark import serving  # imported once, on first use

    host, port = url.split("//", 1)[1].rsplit(":", 1)
    argv = [
        "bench_serving",
        "--backend",
        "sglang",
        "--host",
        host,
        "--port",
        port,
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        path,
        "--num-prompts",
        str(n),
        "--sharegpt-output-len",
        str(a.output_len),
        "--max-concurrency",
        str(c),
        "--request-rate",
        "inf",
        "--temperature",
        "0",
        "--seed",
        "1",
        "--disable-tqdm",
        "--tokenizer",
        a.tokenizer,
        "--ready-check-timeout-sec",
        "5",
        "--output-file",
        out_file,
    ]
    before = os.path.getsize(out_file) if os.path.exists(out_file) else 0
    saved = sys.argv
    sys.argv = argv
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            serving.cli_main()
    except (Exception, SystemExit) as exc:  # one failed rep must not end the run
        print(f"bench_serving failed on {url}: {type(exc).__name__}: {exc}", flush=True)
        print(buf.getvalue()[-2000:], flush=True)
        return None
    finally:
        sys.argv = saved
        with open(out_file[: -len(".jsonl")] + ".log", "a") as f:
            f.write(buf.getvalue())
    with open(out_file) as f:
        f.seek(before)
        lines = [x for x in f.read().splitlines() if x.strip()]
    return json.loads(lines[-1]) if lines else None


def bench(
    a: argparse.Namespace, log: Log, name: str, c: int, *, path: str, n: int, per_side_s: float
) -> None:
    os.makedirs(os.path.join(a.records, "bench"), exist_ok=True)
    out_file = os.path.join(a.records, "bench", f"{name}-c{c}.jsonl")
    for rep in range(1, a.reps + 1):
        if a.deadline and time.time() + 2 * per_side_s + 2 > a.deadline:
            log.write(
                {
                    "kind": "skipped",
                    "step": "bench",
                    "candidate": name,
                    "level": c,
                    "rep": rep,
                    "why": "deadline",
                }
            )
            return
        first = None
        if a.fresh_from is not None:
            got = fresh_file(a, n)
            if got is None:
                log.write({"kind": "skipped", "step": "bench", "candidate": name, "level": c,
                           "rep": rep, "why": "fresh prompts used up"})  # fmt: skip
                return
            path, first = got
        for side, url in (("baseline", a.baseline), ("candidate", a.servers[name])):
            t0 = time.time()
            r = bench_once(a, url, c, path=path, n=n, out_file=out_file)
            line = {
                "kind": "bench",
                "candidate": name,
                "level": c,
                "rep": rep,
                "side": side,
                "ok": r is not None,
                "wall_s": round(time.time() - t0, 2),
                "prompts_from": first,
            }
            if r is not None:
                line.update(
                    {
                        k: r.get(k)
                        for k in (
                            "completed",
                            "duration",
                            "median_e2e_latency_ms",
                            "mean_e2e_latency_ms",
                            "p90_e2e_latency_ms",
                            "median_ttft_ms",
                            "median_tpot_ms",
                            "output_throughput",
                            "total_output_tokens",
                            "accept_length",
                            "max_concurrency",
                        )
                    }
                )
            log.write(
                line,
                f"bench {name} c={c} rep {rep} {side}: median E2E "
                f"{line.get('median_e2e_latency_ms')} ms, accept {line.get('accept_length')}",
            )


async def _warm(url: str, conc: int, n: int, out_len: int) -> None:
    import aiohttp

    body = {
        "text": "Warm-up request: say something about the weather.",
        "sampling_params": {"max_new_tokens": out_len, "temperature": 0, "ignore_eos": True},
    }
    sem = asyncio.Semaphore(conc)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:

        async def one(i: int) -> None:
            async with (
                sem,
                s.post(url + "/generate", json={**body, "text": f"{body['text']} {i}"}) as r,
            ):
                await r.read()

        await asyncio.gather(*(one(i) for i in range(n)))


def warmup(a: argparse.Namespace, log: Log) -> None:
    for url in (a.baseline, *a.servers.values()):
        t0 = time.time()
        try:
            asyncio.run(_warm(url, 8, 8, a.output_len))
            asyncio.run(_warm(url, 64, 64, a.output_len))
            ok = True
        except Exception as exc:  # a server that fails its warm-up is reported, not fatal here
            print(f"warm-up of {url} failed: {exc}", flush=True)
            ok = False
        log.write({"kind": "warmup", "url": url, "ok": ok, "wall_s": round(time.time() - t0, 2)})


def pack(a: argparse.Namespace) -> None:
    if a.tar:
        subprocess.run(["tar", "czf", a.tar + ".part", "-C", a.records, "."], check=False)
        os.replace(a.tar + ".part", a.tar)


def main() -> None:
    a = parse_args()
    a.fresh_next = a.fresh_from or 0
    os.makedirs(os.path.join(a.records, "replay"), exist_ok=True)
    log = Log(a.results)
    if a.warmup:
        warmup(a, log)
    factor = 1.3
    for name, c in a.steps:
        n = (PROMPTS_PER_LEVEL if a.fresh_from is None else FRESH_PER_LEVEL)[c]
        side = predicted_side_s(c, n, a.output_len)
        passes = (0 if a.no_replay else 2) + (0 if a.no_bench else 2 * a.reps)
        raw = passes * side + (0 if a.no_replay else 4) + (0 if a.no_bench else 1.5 * a.reps)
        need = raw * factor
        if a.deadline and time.time() + need > a.deadline:
            log.write(
                {
                    "kind": "skipped",
                    "step": "level",
                    "candidate": name,
                    "level": c,
                    "why": "deadline",
                    "needed_s": round(need, 1),
                    "left_s": round(a.deadline - time.time(), 1),
                }
            )
            continue
        t0 = time.time()
        path = prompts_file(a, n) if a.fresh_from is None else ""
        if not a.no_replay:
            got = fresh_file(a, n) if a.fresh_from is not None else (path, None)
            if got is not None:
                replay(a, log, name, c, path=got[0], n=n)
            else:
                log.write({"kind": "skipped", "step": "replay", "candidate": name, "level": c,
                           "why": "fresh prompts used up"})  # fmt: skip
        if not a.no_bench:
            bench(a, log, name, c, path=path, n=n, per_side_s=side * factor)
        spent = time.time() - t0
        factor = max(0.8, min(3.0, spent / raw))
        log.write(
            {
                "kind": "level_done",
                "candidate": name,
                "level": c,
                "wall_s": round(spent, 1),
                "predicted_s": round(need, 1),
                "cost_factor_next": round(factor, 2),
            }
        )
        pack(a)
    pack(a)


if __name__ == "__main__":
    main()
