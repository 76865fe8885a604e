"""The sweep's options, ladder order, stopping rule, setting walk and launch diff (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specproxy.config import build, load_toml_table
from specproxy.core.records.model import SendMode
from specproxy.errors import ConfigError
from specproxy.replay.modes import plan_windows
from specproxy.sweep.config import LEVEL_BLOCKS, Slo, SweepConfig, parse_vary
from specproxy.sweep.launchers import override_flags
from specproxy.sweep.plan import LevelState, batch_size, block_for, cooldown_for, round_order
from specproxy.sweep.settings import launch_diff, walk


def _cfg(**kw: object) -> SweepConfig:
    base: dict[str, object] = {
        "traces": ("t.jsonl",),
        "baseline": "http://127.0.0.1:1",
        "candidate": "http://127.0.0.1:2",
        "concurrency": "4,1,2",
    }
    base.update(kw)
    return SweepConfig(**base)  # type: ignore[arg-type]


def test_ladder_parses_sorted_levels_from_strings_and_lists() -> None:
    """A comma-separated string and a TOML list give the same sorted ladder and its kind."""
    assert _cfg().levels == (1.0, 2.0, 4.0)
    assert _cfg(concurrency=None, rate=[2, 0.5]).levels == (0.5, 2.0)
    assert _cfg(concurrency=None, rate="0.5,2").kind == "rate"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"concurrency": None}, "exactly one ladder"),
        ({"rate": "1,2"}, "exactly one ladder"),
        ({"concurrency": "1,x"}, "not a int"),
        ({"concurrency": "2,2"}, "appears twice"),
        ({"concurrency": "0,1"}, "must be > 0"),
        ({"candidate": None}, "--candidate"),
        ({"vary": ("speculative-num-draft-tokens=2,4",)}, "--vary needs --launch"),
        ({"slo": "ttft=5"}, "slo"),
        ({"pairs": 1}, "pairs"),
    ],
)
def test_bad_options_are_refused_naming_the_problem(
    changes: dict[str, object], message: str
) -> None:
    """Each impossible combination raises a ValueError that names the option at fault."""
    with pytest.raises(ValueError, match=message):
        _cfg(**changes)


def test_launch_without_vary_and_with_urls_are_refused() -> None:
    """--launch is only for a setting sweep and starts both servers itself."""
    with pytest.raises(ValueError, match="give --vary"):
        _cfg(baseline=None, candidate=None, launch="d.toml")
    with pytest.raises(ValueError, match="leave out --baseline"):
        _cfg(launch="d.toml", vary=("speculative-num-steps=1,2",))


def test_slo_parses_both_bounds_and_rejects_non_numbers() -> None:
    """The SLO text gives both bounds in milliseconds; a bad number is named."""
    assert Slo.parse("ttft_ms=500, tpot_ms=40") == Slo(500.0, 40.0)
    assert Slo.parse(None) is None
    with pytest.raises(ValueError, match="not a number"):
        Slo.parse("tpot_ms=fast")


def test_vary_normalises_keys_and_refuses_repeats() -> None:
    """--vary keys are read with dashes; a key given twice or without values is refused."""
    assert parse_vary(["speculative_num_steps=1,2"]) == (("speculative-num-steps", ("1", "2")),)
    with pytest.raises(ValueError, match="given twice"):
        parse_vary(["a=1", "a=2"])
    with pytest.raises(ValueError, match="expected KEY=V1"):
        parse_vary(["a"])


def test_rounds_alternate_up_and_down() -> None:
    """Even rounds walk the ladder upwards and odd rounds downwards."""
    assert round_order([4.0, 1.0, 2.0], 0) == [1.0, 2.0, 4.0]
    assert round_order([4.0, 1.0, 2.0], 1) == [4.0, 2.0, 1.0]


def test_concurrency_blocks_grow_with_the_level() -> None:
    """A concurrency level's blocks hold LEVEL_BLOCKS times its requests in flight; rates keep B."""
    assert block_for("concurrency", 2, 50) == 50
    assert block_for("concurrency", 64, 50) == LEVEL_BLOCKS * 64
    assert block_for("rate", 64, 50) == 50


def test_stopping_rule_closes_on_a_decided_verdict_the_cap_or_no_progress() -> None:
    """With 6 block pairs or more a level closes once decided or at max pairs; before that
    neither closes it, however many pairs it has; a batch that added nothing always does."""
    state = LevelState(8.0)
    assert state.after_batch(60, "inconclusive", 200, units=6).closed is None
    assert "decided" in str(state.after_batch(60, "faster", 200, units=6).closed)
    assert "decided" in str(state.after_batch(60, "no_difference", 200, units=8).closed)
    assert "200 pairs" in str(state.after_batch(200, "inconclusive", 200, units=6).closed)
    assert state.after_batch(60, "faster", 200, units=4).closed is None
    assert state.after_batch(400, "inconclusive", 200, units=4).closed is None
    assert "no pair" in str(LevelState(8.0, pairs=60).after_batch(60, "inconclusive", 200).closed)
    drifted = state.after_batch(300, "slower", 200, units=6, clean_units=5)
    assert drifted.closed is None  # one block pair in a drift episode: one more batch
    assert "18 block pairs" in str(
        state.after_batch(900, "inconclusive", 200, units=18, clean_units=3).closed
    )


def test_batch_is_two_whole_blocks() -> None:
    """A batch sends two whole blocks (two block pairs), whatever --pairs says; a concurrency
    level n uses blocks of max(--block-size, 4n), the last n a cool-down."""
    assert batch_size(50) == 100 and batch_size(64) == 128
    assert block_for("concurrency", 1, 16) == 16 and block_for("concurrency", 64, 16) == 256
    assert block_for("rate", 64, 16) == 16
    assert cooldown_for("concurrency", 16) == 16 and cooldown_for("rate", 16) == 0


def test_cooldown_flags_each_blocks_last_requests() -> None:
    """In alternate mode the last `cooldown` requests of every block are sent but not counted."""
    windows = plan_windows(SendMode.ALTERNATE, 12, None, block_size=6, cooldown=2)
    assert len(windows) == 4
    for window in windows:
        flags = [job.warmup for job in window.jobs]
        assert flags == [False] * 4 + [True] * 2
    with pytest.raises(ValueError, match="cooldown"):
        plan_windows(SendMode.ALTERNATE, 12, None, block_size=6, cooldown=6)


def test_grid_is_walked_one_key_at_a_time() -> None:
    """Two --vary keys give each value of the first, then each value of the second, alone."""
    walked = [s.values for s in walk((("a", ("1", "2")), ("b", ("3",))))]
    assert walked == [{"a": "1"}, {"a": "2"}, {"b": "3"}]


def test_launch_diff_names_each_changed_argument() -> None:
    """The diff against the previous value lists the changed keys only; none for the first."""
    assert launch_diff(None, {"a": "1"}) == []
    diff = launch_diff({"a": "1", "b": "2"}, {"a": "4", "b": "2"})
    assert diff == [{"key": "a", "from": "1", "to": "4"}]


def test_override_flags_replaces_or_appends() -> None:
    """A setting replaces a flag's value in the command, or appends the flag when absent."""
    argv = ["srv", "--spec-draft-n-max", "8"]
    assert override_flags(argv, {"spec-draft-n-max": "2"}) == ["srv", "--spec-draft-n-max", "2"]
    assert override_flags(argv, {"draft-p-min": "0.5"})[-2:] == ["--draft-p-min", "0.5"]


def test_toml_config_fills_the_sweep_and_names_an_unknown_key(tmp_path: Path) -> None:
    """A [sweep] table gives lists for the ladder and --vary; an unknown key is refused by name."""
    good = tmp_path / "sweep.toml"
    good.write_text(
        '[sweep]\ntraces = ["t.jsonl"]\nlaunch = "d.toml"\nconcurrency = [16, 1, 4]\n'
        'vary = ["speculative-num-draft-tokens=2,4"]\nslo = "tpot_ms=40"\n',
        encoding="utf-8",
    )
    cfg = build(SweepConfig, load_toml_table(good, "sweep"), {"pairs": 60}, str(good))
    assert cfg.levels == (1.0, 4.0, 16.0) and cfg.pairs == 60
    assert cfg.settings == (("speculative-num-draft-tokens", ("2", "4")),)
    bad = tmp_path / "bad.toml"
    bad.write_text('[sweep]\ntraces = ["t"]\nconcurency = [1]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="concurency"):
        build(SweepConfig, load_toml_table(bad, "sweep"), {}, str(bad))
