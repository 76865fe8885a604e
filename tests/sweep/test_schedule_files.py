"""The schedule's pure parts: the adaptive value's launch flags and what the adaptive
config can and cannot hold (``sweep.launchers``, ``sweep.schedule``)."""

from __future__ import annotations

from typing import Any

from specproxy.launch.description import load_description
from specproxy.report.sweep_schedule import notes, tables
from specproxy.sweep.launchers import SglangLauncher, override_flags, setting_flags
from specproxy.sweep.schedule import adaptive_config, best_settings

STEPS = "speculative-num-steps"


def test_the_adaptive_value_launches_sglang_adaptive_at_topk_1() -> None:
    """``speculative-num-steps=adaptive`` -> --speculative-adaptive, topk 1, the description's
    steps as the start (its draft tokens stay: at topk 1 SGLang makes them steps + 1)."""
    launcher = SglangLauncher(load_description("deploy/sglang/deepseek-v3-nextn.toml"))
    argv = list(launcher.candidate({STEPS: "adaptive"}).argv)
    assert "--speculative-adaptive" in argv
    assert argv[argv.index("--speculative-eagle-topk") + 1] == "1"
    assert argv[argv.index("--speculative-num-steps") + 1] == "3"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "4"
    fixed = list(launcher.candidate({STEPS: "5"}).argv)
    assert fixed[fixed.index("--speculative-num-steps") + 1] == "5"
    assert "--speculative-adaptive" not in fixed


def test_setting_flags_and_bare_flags() -> None:
    assert setting_flags({"speculative_num_steps": "2"}) == {STEPS: "2"}
    flags = setting_flags({STEPS: "adaptive"})
    assert flags == {"speculative-adaptive": True, "speculative-eagle-topk": "1"}
    argv = override_flags(["srv", "--speculative-eagle-topk", "4"], flags)
    assert argv == ["srv", "--speculative-eagle-topk", "1", "--speculative-adaptive"]


def _row(level: float, setting: dict[str, str] | None) -> dict[str, Any]:
    chosen = ",".join(f"{k}={v}" for k, v in setting.items()) if setting else "off"
    return {"level": level, "setting": setting, "chosen": chosen}


def test_ranges_start_between_levels_and_off_is_not_written() -> None:
    """Keys are batch-size lower bounds: 1, then the geometric mean of neighbours rounded up;
    an off level is left out and named."""
    rows = [_row(1, {STEPS: "5"}), _row(4, {STEPS: "3"}), _row(16, {STEPS: "1"}), _row(64, None)]
    config, missing = adaptive_config(rows, "concurrency")
    assert config == {"1": {"candidate_steps": [5]}, "2": {"candidate_steps": [3]},
                      "8": {"candidate_steps": [1]}}  # fmt: skip
    assert len(missing) == 1
    assert missing[0].startswith("off at 64 streams")


def test_what_the_adaptive_config_cannot_hold() -> None:
    """A rate ladder, or a chosen draft-token or topk value, gives no adaptive config."""
    config, missing = adaptive_config([_row(1.5, {STEPS: "3"})], "rate")
    assert config is None
    assert "rate ladder" in missing[0]
    rows = [_row(1, {STEPS: "3"}), _row(8, {"speculative-num-draft-tokens": "6"})]
    config, missing = adaptive_config(rows, "concurrency")
    assert config is None
    assert "only speculative-num-steps" in missing[-1]
    config, missing = adaptive_config([_row(1, None), _row(8, None)], "concurrency")
    assert config is None
    assert len(missing) == 2


def _entry(value: str, levels: list[tuple[float, str, float, float, float]]) -> dict[str, Any]:
    return {
        "label": f"{STEPS}={value}", "setting": {STEPS: value}, "status": "completed",
        "levels": [{"level": lv, "verdict": v, "e2e_ratio": p, "e2e_ci": [lo, hi], "units": 8,
                    "tpot_ratio": p, "tpot_ci": [lo, hi]} for lv, v, p, lo, hi in levels],
    }  # fmt: skip


def test_best_settings_reads_the_sweep_entries() -> None:
    """From sweep.json entries: the choice per level, TPOT by its own interval rule, and a
    load sweep (no setting) has none."""
    entries = [
        _entry("1", [(1, "faster", 0.8, 0.78, 0.82), (16, "faster", 0.9, 0.88, 0.92)]),
        _entry("4", [(1, "faster", 0.6, 0.57, 0.63), (16, "slower", 1.2, 1.1, 1.3)]),
    ]
    found = best_settings(entries)
    assert found is not None
    e2e = found["e2e"]["levels"]
    assert [r["chosen"] for r in e2e] == [f"{STEPS}=4", f"{STEPS}=1"]
    assert e2e[0]["vs_runner_up"]["says"] == "the best is faster"
    assert [r["chosen"] for r in found["tpot"]["levels"]] == [f"{STEPS}=4", f"{STEPS}=1"]
    assert found["adaptive_run"] is None
    assert best_settings([{"label": "the candidate", "setting": {}, "levels": []}]) is None


def test_the_report_names_an_adaptive_value_the_server_refused() -> None:
    """A refused adaptive value gets one line with the server's last error line."""
    entries = [
        _entry("1", [(1, "faster", 0.8, 0.78, 0.82)]),
        {"label": f"{STEPS}=adaptive", "setting": {STEPS: "adaptive"}, "status": "rejected",
         "error": "exit status 1:\nValueError: adaptive needs topk 1", "levels": []},
    ]  # fmt: skip
    best = best_settings(entries)
    assert best is not None
    doc = {"best_settings": best, "schedule": {}}
    lines = notes(doc)
    assert lines[-1] == f"adaptive ({STEPS}=adaptive): rejected: ValueError: adaptive needs topk 1"
    head = tables(doc)[0][1][0]
    assert head[-1] == "adaptive vs best"
