"""GPU host: the stream-burst estimate of the step histogram against SGLang's own counters on
many ``/generate`` streams, at several concurrencies and prompt lengths.

Per request (one JSON line in ``--out``): the tokens of every stream chunk, the server's
``spec_correct_drafts_histogram`` and ``spec_verify_ct`` from the final event, the estimate
(``specproxy.core.measurement.acceptance.burst_histogram``), whether the estimate is the server's
histogram less one last step (``match``) and whether the stream had fewer chunks than verify
steps plus one (``merged``: steps released together). The last line is the summary per
concurrency: match and merged shares, and the per-position rates from the server's
histograms and from the estimates. Standard library and specproxy only.

    python3 bench/gpu/breakdown/estimate_check.py --url http://127.0.0.1:30001 \
        --prompts PROMPTS.json --levels 1,8,32 --requests 48 --out OUT/estimate.jsonl
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import random
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from specproxy.core.compare.breakdown import ESTIMATED, EXACT, step_histogram
from specproxy.core.measurement.acceptance import burst_histogram
from specproxy.core.records.model import Role

REPEATS = (1, 4, 16)  # prompt text repeated: short, medium and long contexts


def _stream(url: str, text: str, max_new: int) -> tuple[list[int], dict[str, Any]]:
    """Tokens per chunk and the final meta_info of one greedy ``/generate`` stream."""
    parts = urlsplit(url)
    if parts.hostname is None:
        raise SystemExit(f"--url {url}: no host")
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)
    body = {
        "text": text,
        "sampling_params": {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True},
        "stream": True,
    }
    conn.request("POST", "/generate", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"/generate answered {response.status}: {response.read()[:200]!r}")
    tokens: list[int] = []
    meta: dict[str, Any] = {}
    seen = 0
    for raw in response:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: {"):
            continue
        meta = json.loads(line[6:])["meta_info"]
        tokens.append(meta["completion_tokens"] - seen)
        seen = meta["completion_tokens"]
    conn.close()
    return tokens, meta


def _matches(server: list[int], estimate: tuple[int, ...] | None, last: int) -> bool:
    if estimate is None:
        return False
    mine = list(estimate)
    for k in range(max(last - 1, 0), len(server)):
        if server[k]:
            less = list(server)
            less[k] -= 1
            while less and less[-1] == 0:
                less.pop()
            while mine and mine[-1] == 0:
                mine.pop()
            if less == mine:
                return True
    return False


def _one(url: str, text: str, *, max_new: int, level: int) -> dict[str, Any]:
    tokens, meta = _stream(url, text, max_new)
    server = meta.get("spec_correct_drafts_histogram") or meta.get("spec_accept_histogram") or []
    estimate = burst_histogram(tokens)
    verify = meta.get("spec_verify_ct")
    return {
        "level": level,
        "prompt_tokens": meta.get("prompt_tokens"),
        "chunk_tokens": tokens,
        "server": server,
        "verify_ct": verify,
        "estimate": list(estimate) if estimate else None,
        "match": _matches(server, estimate, tokens[-1] if tokens else 0),
        "merged": verify is not None and len(tokens) < verify + 1,
    }


def _summed(hists: list[list[int]]) -> list[int]:
    out: list[int] = []
    for h in hists:
        for k, n in enumerate(h):
            if k == len(out):
                out.append(0)
            out[k] += n
    return out


def _summary(level: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    exact = step_histogram(
        Role.CANDIDATE, EXACT, "server", len(rows), _summed([r["server"] for r in rows])
    )
    est = step_histogram(
        Role.CANDIDATE, ESTIMATED, "bursts", len(rows),
        _summed([r["estimate"] for r in rows if r["estimate"]]),
    )  # fmt: skip
    return {
        "summary": True,
        "level": level,
        "requests": len(rows),
        "match_share": sum(r["match"] for r in rows) / len(rows),
        "merged_share": sum(r["merged"] for r in rows) / len(rows),
        "exact_position_rates": exact.position_rates,
        "estimated_position_rates": est.position_rates,
        "exact_steps": exact.steps,
        "estimated_steps": est.steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--prompts", required=True, help="ShareGPT-style JSON list")
    parser.add_argument("--levels", default="1,8,32")
    parser.add_argument("--requests", type=int, default=48, help="per level")
    parser.add_argument("--max-new", type=int, default=64)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    data = json.loads(Path(args.prompts).read_text())
    texts = [c["conversations"][0]["value"] for c in data if c.get("conversations")]
    rng = random.Random(7)
    with Path(args.out).open("a") as out:
        for level in (int(v) for v in args.levels.split(",")):
            jobs = [rng.choice(texts) * REPEATS[i % len(REPEATS)] for i in range(args.requests)]
            one = functools.partial(_one, args.url, max_new=args.max_new, level=level)
            with ThreadPoolExecutor(level) as pool:
                rows = list(pool.map(one, (t[:30000] for t in jobs)))
            for row in rows:
                out.write(json.dumps(row) + "\n")
            summary = json.dumps(_summary(level, rows))
            out.write(summary + "\n")
            out.flush()
            sys.stdout.write(summary + "\n")


if __name__ == "__main__":
    main()
