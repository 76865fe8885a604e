"""``--slo``: percentile bounds for the capacity beside the goodput form, on the command
line and in a ``[sweep]`` TOML table, and errors that name the bad key."""

from __future__ import annotations

from pathlib import Path

import pytest

from specproxy.config import build, load_toml_table
from specproxy.core.load.capacity import Bound
from specproxy.errors import ConfigError
from specproxy.sweep.config import Slo, SweepConfig


def test_percentile_bounds_parse_beside_the_goodput_form() -> None:
    slo = Slo.parse("ttft_p99_ms=500, tpot_p99_ms=40,e2e_p95_ms=2000,tpot_ms=50")
    assert slo is not None
    assert slo.bounds == (Bound("ttft", 99.0, 500.0), Bound("tpot", 99.0, 40.0),
                          Bound("e2e", 95.0, 2000.0))  # fmt: skip
    assert (slo.ttft_ms, slo.tpot_ms) == (None, 50.0)
    assert Slo.parse("tpot_p99.9_ms=40") == Slo(bounds=(Bound("tpot", 99.9, 40.0),))
    assert Slo.parse("ttft_ms=500,tpot_ms=40") == Slo(500.0, 40.0)  # the old form, unchanged
    assert Slo.parse({"ttft_p99_ms": 500}) == Slo(bounds=(Bound("ttft", 99.0, 500.0),))
    assert Slo.parse(slo.text()) == slo


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ttft_p99=500", "unknown key 'ttft_p99'"),
        ("itl_p99_ms=5", "unknown key 'itl_p99_ms'"),
        ("tpot_p100_ms=5", "unknown key 'tpot_p100_ms'"),
        ("tpot_p0_ms=5", "tpot_p0_ms: the percentile must lie strictly between 0 and 100"),
        ("tpot_p99_ms=fast", "tpot_p99_ms: not a number"),
        ("e2e_p95_ms=-1", "e2e_p95_ms must be > 0"),
        ("tpot_p99_ms=40,tpot_p99_ms=50", "tpot_p99_ms: given twice"),
        ("tpot_ms", "slo tpot_ms: expected tpot_ms=VALUE"),
    ],
)
def test_a_bad_bound_is_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Slo.parse(text)


B, C = "http://127.0.0.1:1", "http://127.0.0.1:2"  # URLs only read, never called


def test_sweep_config_takes_bounds_from_the_command_line_and_toml(tmp_path: Path) -> None:
    cfg = SweepConfig(traces=("t",), baseline=B, candidate=C, concurrency="1,2",
                      slo="tpot_p90_ms=30")  # fmt: skip
    assert cfg.slo_bounds is not None and cfg.slo_bounds.bounds == (Bound("tpot", 90.0, 30.0),)
    table = tmp_path / "sweep.toml"
    table.write_text(f'[sweep]\ntraces = ["t"]\nbaseline = "{B}"\ncandidate = "{C}"\n'
                     'concurrency = [1, 2]\nslo = { ttft_p99_ms = 500, tpot_ms = 40 }\n',
                     encoding="utf-8")  # fmt: skip
    from_file = build(SweepConfig, load_toml_table(table, "sweep"), {}, str(table))
    assert from_file.slo_bounds == Slo(tpot_ms=40.0, bounds=(Bound("ttft", 99.0, 500.0),))
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[sweep]\ntraces = ["t"]\nbaseline = "{B}"\ncandidate = "{C}"\n'
                   'concurrency = [1]\nslo = "ttft_p99ms=5"\n', encoding="utf-8")  # fmt: skip
    with pytest.raises(ConfigError, match="ttft_p99ms"):
        build(SweepConfig, load_toml_table(bad, "sweep"), {}, str(bad))
