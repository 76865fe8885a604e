# (a GPU-host client: it prints one JSON line and sends requests to a local server only)
"""Greedy /generate requests against one SGLang server: accept length and latency.

usage: python3 measure_accept.py URL PROMPTS.json [--n 16] [--concurrency 1]
           [--max-new-tokens 64] [--warmup 2] [--label NAME] [--out FILE.jsonl]

Sends the first --n prompts of PROMPTS (a ShareGPT-style list such as
../testbed/prompts_sharegpt128.json, whose first human turn is sent as raw text, as
bench_serving does, or a list of strings) to URL/generate, temperature 0, a fixed length with
ignore_eos, at most --concurrency at a time, after --warmup unrecorded requests. Records per
request completion_tokens, spec_verify_ct and E2E, and prints (and appends to --out) one JSON
line: the accept length as completion tokens / verify steps over all requests, the mean
per-request spec_accept_length, E2E p50 and the mean time per output token. Standard library only.
"""

import argparse
import json
import statistics
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def texts(path: str, n: int) -> list[str]:
    with open(path) as f:
        data = json.load(f)
    return [d if isinstance(d, str) else d["conversations"][0]["value"] for d in data[:n]]


def generate(url: str, text: str, n_new: int) -> dict[str, Any]:
    body = {
        "text": text,
        "sampling_params": {"temperature": 0, "max_new_tokens": n_new, "ignore_eos": True},
    }
    req = urllib.request.Request(
        url + "/generate", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as r:
        meta = json.loads(r.read()).get("meta_info", {})
    return {
        "e2e_s": time.perf_counter() - t,
        "completion_tokens": meta.get("completion_tokens"),
        "prompt_tokens": meta.get("prompt_tokens"),
        "spec_verify_ct": meta.get("spec_verify_ct"),
        "spec_accept_length": meta.get("spec_accept_length"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("prompts")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--label", default="")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    prompts = texts(a.prompts, a.n)
    for text in prompts[: a.warmup]:
        generate(a.url, text, a.max_new_tokens)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(a.concurrency) as pool:
        rows = list(pool.map(lambda s: generate(a.url, s, a.max_new_tokens), prompts))
    wall = time.perf_counter() - t0
    ct = sum(r["completion_tokens"] or 0 for r in rows)
    vc = sum(r["spec_verify_ct"] or 0 for r in rows)
    per_req = [r["spec_accept_length"] for r in rows if r["spec_accept_length"] is not None]
    res = {
        "label": a.label,
        "concurrency": a.concurrency,
        "requests": len(rows),
        "max_new_tokens": a.max_new_tokens,
        "accept_length": round(ct / vc, 3) if vc else None,
        "accept_length_mean_per_request": round(statistics.mean(per_req), 3) if per_req else None,
        "e2e_p50_ms": round(statistics.median(r["e2e_s"] for r in rows) * 1e3, 1),
        "ms_per_output_token": round(
            statistics.mean(r["e2e_s"] / r["completion_tokens"] for r in rows) * 1e3, 2
        ),
        "output_tokens_per_s": round(ct / wall, 1),
        "prompt_tokens_mean": round(statistics.mean(r["prompt_tokens"] or 0 for r in rows), 1),
    }
    print(json.dumps(res), flush=True)
    if a.out:
        with open(a.out, "a") as f:
            f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
