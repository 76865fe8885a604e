"""The sweep's recommendation gate and its one-page report, from figures alone (no servers)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from specproxy.errors import ConfigError
from specproxy.report.sweep_figures import LevelFigures, SideRates
from specproxy.report.sweep_html import render_sweep_html
from specproxy.report.sweep_report import load_sweep, render_sweep_md, render_sweep_text
from specproxy.sweep.recommend import Candidate, crossover_json, crossovers, recommend_sweep

SCOPE = (("model", "m@r1"), ("server", "sglang 0.5.16"), ("gpu", "H200"))


def _level(level: float, ratio: float, *, simulated: bool = False,
           missing: tuple[str, ...] = ()) -> LevelFigures:  # fmt: skip
    rates = {s: SideRates(100.0, 2.0, 10, 10) for s in ("baseline", "candidate")}
    return LevelFigures(
        level=level, kind="concurrency", run_dir=f"c{level:g}", verdict="faster",
        verdict_reason="", e2e_ratio=ratio, e2e_ci=(ratio - 0.05, ratio + 0.05),
        tpot_ratio=ratio, tpot_ci=(ratio - 0.05, ratio + 0.05), pairs=100, accept_length=2.5,
        failures={"baseline": 0, "candidate": 0}, rates=rates, simulated=simulated,
        recommendation=None, recommendation_reason="", missing_conditions=missing, scope=SCOPE,
    )  # fmt: skip


def _candidate(label: str, ratios: list[tuple[float, float]], **kw: Any) -> Candidate:
    levels = tuple(_level(lv, r, **kw) for lv, r in ratios)
    return Candidate(label, levels, crossovers(levels)["e2e"])


CROSSING = [(8.0, 0.7), (32.0, 0.9), (64.0, 1.2)]


def test_the_value_that_pays_furthest_is_recommended_with_its_scope() -> None:
    """Of two values, the one whose crossover lies further is named, with load range and scope."""
    near = _candidate("k=2", [(8.0, 0.8), (32.0, 1.1), (64.0, 1.3)])
    far = _candidate("k=4", CROSSING)
    found = recommend_sweep([near, far], kind="concurrency", status="completed")
    assert found.chosen == "k=4"
    assert found.text is not None
    assert "k=4 pays up to ~" in found.text and "concurrent streams" in found.text
    assert "gpu: H200" in found.text and "load range: 8-64 concurrent streams" in found.text


def test_simulated_levels_get_only_the_simulated_label() -> None:
    """Any simulated level makes the recommendation `simulated` and nothing more."""
    found = recommend_sweep([_candidate("c", CROSSING, simulated=True)], kind="concurrency",
                            status="completed")  # fmt: skip
    assert found.text == "simulated"


def test_a_missing_condition_or_an_unfinished_sweep_blocks_it() -> None:
    """A level with a missing condition, or an aborted sweep, gives no recommendation."""
    blocked = recommend_sweep([_candidate("c", CROSSING, missing=("matched_baseline",))],
                              kind="concurrency", status="completed")  # fmt: skip
    assert blocked.text is None and "matched_baseline" in blocked.reason
    aborted = recommend_sweep([_candidate("c", CROSSING)], kind="concurrency", status="aborted")
    assert aborted.text is None and "aborted" in aborted.reason


def test_paying_nowhere_is_never_recommended_and_everywhere_says_so() -> None:
    """A value slower at every level gets no recommendation; one faster everywhere says so."""
    nowhere = recommend_sweep([_candidate("c", [(8.0, 1.2), (64.0, 1.4)])],
                              kind="concurrency", status="completed")  # fmt: skip
    assert nowhere.text is None and "no setting pays" in nowhere.reason
    everywhere = recommend_sweep([_candidate("c", [(8.0, 0.6), (64.0, 0.8)])], kind="rate",
                                 status="completed")  # fmt: skip
    assert (
        everywhere.text is not None and "every tested load (up to 64 requests/s)" in everywhere.text
    )


def test_open_interval_bounds_are_written_as_null() -> None:
    """An interval reaching past the ladder is written with null, which JSON can hold."""
    c = _candidate("c", [(8.0, 0.6), (64.0, 0.8)]).crossover
    written = crossover_json(c)
    assert written is not None and written["status"] == "pays_everywhere"
    assert isinstance(written["ci"], list) and written["ci"][1] is None
    assert math.isinf(c.ci[1]) if c.ci else False
    json.dumps(written, allow_nan=False)


def _doc() -> dict[str, Any]:
    levels = [_level(lv, r).to_json() for lv, r in CROSSING]
    cross = crossovers([_level(lv, r) for lv, r in CROSSING])
    entry = {"setting": {}, "label": "the candidate", "status": "completed", "error": None,
             "levels": levels, "crossover": crossover_json(cross["e2e"]),
             "crossovers": {m: crossover_json(c) for m, c in cross.items()}}  # fmt: skip
    rejected = {"setting": {"k": "9"}, "label": "k=9", "status": "rejected",
                "error": "ValueError: k too large", "levels": [], "crossover": None}  # fmt: skip
    return {"status": "completed", "kind": "concurrency", "ladder": [8, 32, 64],
            "order": "up and down", "stopping_rule": "decided", "pairs_max": 100,
            "slo": {"ttft_ms": 200.0, "tpot_ms": None}, "simulated": True,
            "settings": [entry, rejected], "levels": levels, "crossover": entry["crossover"],
            "recommendation": "simulated", "recommendation_reason": "simulated"}  # fmt: skip


def test_text_and_markdown_show_the_table_crossovers_and_refusals() -> None:
    """Text and Markdown list every level's ratios, both crossovers and the refused value."""
    doc = _doc()
    estimate = doc["crossover"]["estimate"]
    for page in (render_sweep_text(doc), render_sweep_md(doc)):
        assert "0.900 [0.850, 0.950]" in page
        assert f"~{estimate:.3g} concurrent streams" in page
        assert "TPOT crossover" in page
        assert "k=9: rejected - ValueError: k too large" in page
        assert "SIMULATED" in page
    assert render_sweep_md(doc).count("\n| ") >= 4


def test_html_draws_interval_bars_and_marks_the_crossover() -> None:
    """The HTML page has the ratio charts with one bar per level and the crossover's label."""
    doc = _doc()
    page = render_sweep_html(doc)
    estimate = doc["crossover"]["estimate"]
    assert page.count("<svg") == 5  # E2E, TPOT, acceptance, throughput, goodput
    assert page.count('stroke-dasharray="3 3"') >= 2  # the crossover marks (E2E and TPOT)
    assert f">{estimate:.3g}</text>" in page
    assert page.count("<path d=") >= 6  # three interval bars on each ratio chart
    assert "http" not in page and "<script" not in page


def test_a_directory_without_a_sweep_log_is_a_clear_error(tmp_path: Path) -> None:
    """Loading a folder with no sweep.json names the file it looked for."""
    with pytest.raises(ConfigError, match=r"sweep\.json"):
        load_sweep(tmp_path)
