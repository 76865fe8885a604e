"""Summarise the validation run directories and say whether each expectation held.

Usage: python3 bench/gpu/summarize_checks.py RUNS_DIR API_KEY. Reads RUNS_DIR/pair and
RUNS_DIR/refused (written by gpu_run.sh), checks the statuses, that every server
process is gone (any survivor's process group is killed and reported), and that the
API key appears in no file. Prints one line per expectation and a final verdict;
exits 1 when one failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any


def _load(path: Path) -> dict[str, Any]:
    try:
        value: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"_error": f"{path}: {exc}"}
    return value


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def _leftovers(launch: dict[str, Any]) -> list[str]:
    """Pids recorded by the launcher that still run; their groups get SIGKILL."""
    found = []
    for role, server in (launch.get("servers") or {}).items():
        pid = server.get("pid")
        if isinstance(pid, int) and _alive(pid):
            found.append(f"{role} pid {pid}")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    return found


def _expectations(runs: Path, key: str) -> list[tuple[str, bool, str]]:
    pair_exp, pair_launch = (
        _load(runs / "pair" / "experiment.json"),
        _load(runs / "pair" / "launch.json"),
    )
    ref_exp, ref_launch = (
        _load(runs / "refused" / "experiment.json"),
        _load(runs / "refused" / "launch.json"),
    )
    diff = pair_exp.get("launch_diff") or {}
    checks = (
        (runs / "pair" / "checks.txt").read_text()
        if (runs / "pair" / "checks.txt").exists()
        else ""
    )
    leaked = [
        str(p)
        for p in runs.rglob("*")
        if p.is_file() and key and key in p.read_text(errors="replace")
    ]
    left = _leftovers(pair_launch) + _leftovers(ref_launch)
    cand = (ref_launch.get("servers") or {}).get("candidate") or {}
    return [
        ("pair experiment not_run with both configs", pair_exp.get("status") == "not_run"
         and bool((pair_exp.get("baseline") or {}).get("fingerprint"))
         and (pair_exp.get("candidate") or {}).get("algorithm") == "STANDALONE", str(pair_exp.get("status"))),
        ("pair is a matched baseline", diff.get("matched") is True,
         ", ".join(d["key"] for d in diff.get("other", []))),
        ("pair stopped cleanly", pair_launch.get("state") == "stopped", str(pair_launch.get("state"))),
        ("every check gave its expected exit status", bool(checks) and "expected" in checks
         and all(line.split("exit ")[1].split(" ")[0] == line.split("expected ")[1].rstrip(")")
                 for line in checks.strip().splitlines()), checks.replace("\n", "; ")),
        ("refused config recorded as rejected", ref_exp.get("status") == "rejected", str(ref_exp.get("error"))),
        ("refused candidate exited non-zero", cand.get("state") == "rejected" and cand.get("exit_code") not in (None, 0),
         str(cand.get("exit_code"))),
        ("no server process left", not left, ", ".join(left)),
        ("API key in no file", not leaked, ", ".join(leaked)),
    ]  # fmt: skip


def main() -> int:
    runs, key = Path(sys.argv[1]), sys.argv[2]
    results = _expectations(runs, key)
    for name, ok, detail in results:
        sys.stdout.write(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}\n")
    ok = all(r[1] for r in results)
    sys.stdout.write("VALIDATION OK\n" if ok else "VALIDATION FAILED\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
