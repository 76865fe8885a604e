"""Is speculation on? Evidence from an OpenAI-compatible server that has no SGLang server info.

llama.cpp's ``llama-server`` says it twice: ``GET /slots`` lists each slot with
``speculative: true|false``, and a response's ``timings`` carries ``draft_n`` only when
a draft model proposed tokens. Other OpenAI-compatible servers (vLLM...) say nothing
here; then the evidence is ``None`` and the check is a warning, never a guess.
"""

from __future__ import annotations

from typing import Any

import orjson

from specproxy.core.records.model import Role
from specproxy.launch.checks import CheckResult, CheckStatus


def from_slots(status: int, raw: bytes) -> bool | None:
    """True/False from llama.cpp's ``/slots`` answer, None when it is not that."""
    if status != 200:
        return None
    try:
        slots = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    flags = (
        [s.get("speculative") for s in slots if isinstance(s, dict)]
        if isinstance(slots, list)
        else []
    )
    known = [f for f in flags if isinstance(f, bool)]
    return any(known) if known else None


def from_timings(body: Any) -> bool | None:
    """True when a response's ``timings`` shows drafted tokens, False when it shows none."""
    timings = body.get("timings") if isinstance(body, dict) else None
    if not isinstance(timings, dict):
        return None
    return bool(timings.get("draft_n"))


def combine(*found: bool | None) -> bool | None:
    """Any positive evidence wins; else any negative; else unknown."""
    if any(f is True for f in found):
        return True
    if any(f is False for f in found):
        return False
    return None


def speculation_rows(drafting: dict[Role, bool | None]) -> list[CheckResult]:
    """speculation_off / speculation_on rows for the sides judged by evidence (not server info)."""
    rows = []
    for role, seen in drafting.items():
        want = role is Role.CANDIDATE
        name = "speculation_on" if want else "speculation_off"
        if seen is None:
            status, detail = CheckStatus.WARN, "the server does not say whether it drafts"
        else:
            status = CheckStatus.PASS if seen is want else CheckStatus.FAIL
            detail = "server reports drafting" if seen else "server reports no drafting"
        rows.append(CheckResult(name, status, f"{detail} (/slots, timings.draft_n)", str(role)))
    return rows
