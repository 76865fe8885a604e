"""Read the real SGLang 0.5.16 captures under tests/fixtures (server info, model info)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sglang-0.5.16"
RUN_A = "run_a_init0.1"
RUN_B = "run_b_attn_off"


@cache
def _index(run: str, server: str) -> tuple[dict[str, Any], ...]:
    entries = json.loads((FIXTURES / run / server / "index.json").read_text(encoding="utf-8"))
    return tuple(entries)


def exchange_body(run: str, server: str, name: str) -> Any:
    """The captured body of exchange ``name``: its JSON (a fresh copy per call) or its text."""
    for entry in _index(run, server):
        if entry["name"] == name:
            return json.loads(json.dumps(entry["json"])) if "json" in entry else entry["text"]
    raise KeyError(f"{run}/{server}: no exchange named {name}")


def server_info(server: str, run: str = RUN_A) -> dict[str, Any]:
    """The captured ``GET /server_info`` body of ``server``."""
    return exchange_body(run, server, "server_info")


def model_info(server: str, run: str = RUN_A) -> dict[str, Any]:
    """The captured ``GET /model_info`` body of ``server``."""
    return exchange_body(run, server, "model_info")


def generate_body(server: str, run: str = RUN_A) -> dict[str, Any]:
    """The captured non-streaming ``POST /generate`` response of ``server``."""
    return exchange_body(run, server, "generate")


def launch_command(server: str, run: str = RUN_A) -> list[str]:
    """The captured launch command line of ``server`` (``logs/NAME.cmd``), as argv."""
    path = FIXTURES / run / "logs" / f"{server}.cmd"
    return path.read_text(encoding="utf-8").split()
