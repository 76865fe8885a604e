"""Exercise specproxy's SGLang reads against the live pair; write what they returned.

Run by pair_checks.sh: fetch_launch_config, fetch_snapshot (before and after one
greedy /generate) and flush_cache on both servers. Prints a short summary and exits
1 if a read failed or a figure is missing.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from specproxy.backends.base import BackendSpec
from specproxy.backends.http import HttpBackend, open_backend
from specproxy.backends.sglang import fetch_launch_config, fetch_snapshot, flush_cache


async def _generate(server: HttpBackend) -> dict[str, Any]:
    body = {
        "text": "one two three four five",
        "sampling_params": {"max_new_tokens": 32, "temperature": 0},
    }
    status, raw = await server.post_json("/generate", body, timeout_s=60)
    if status != 200:
        raise RuntimeError(f"{server.spec.url}/generate: HTTP {status}")
    value: dict[str, Any] = json.loads(raw)
    return value


async def _side(url: str) -> dict[str, Any]:
    async with open_backend(BackendSpec(url, None)) as server:
        config = await fetch_launch_config(server)
        before = await fetch_snapshot(server)
        meta = (await _generate(server))["meta_info"]
        after = await fetch_snapshot(server)
        flushed = await flush_cache(server, wait_s=5)
    return {
        "fingerprint": config.fingerprint,
        "algorithm": config.speculative_algorithm,
        "version": config.version,
        "complete": config.complete,
        "metrics_before_bytes": len(before["metrics_text"] or ""),
        "metrics_after_has_spec_verify": "sglang:spec_verify_calls_total"
        in (after["metrics_text"] or ""),
        "spec_fields": {k: v for k, v in meta.items() if k.startswith("spec_")},
        "api_key_in_snapshot": after["server_info"].get("api_key"),
        "flushed": flushed,
    }


async def _read_both(baseline_url: str, candidate_url: str) -> dict[str, Any]:
    return {"baseline": await _side(baseline_url), "candidate": await _side(candidate_url)}


def main() -> int:
    baseline_url, candidate_url, out = sys.argv[1:4]
    result = asyncio.run(_read_both(baseline_url, candidate_url))
    text = json.dumps(result, indent=2)
    Path(out).write_text(text + "\n")
    sys.stdout.write(text + "\n")
    ok = (
        result["baseline"]["algorithm"] is None
        and result["candidate"]["algorithm"] == "STANDALONE"
        and result["candidate"]["spec_fields"].get("spec_verify_ct", 0) > 0
        and result["baseline"]["metrics_before_bytes"] > 0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
