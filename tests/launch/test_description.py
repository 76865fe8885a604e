"""Launch descriptions: validation with the key and file named, and the commands they give."""

from __future__ import annotations

from pathlib import Path

import pytest

from specproxy.cli import main
from specproxy.core.records.model import Role
from specproxy.errors import ConfigError
from specproxy.launch.description import load_description, render_args

GOOD = """
name = "tiny"
validated = false
[model]
path = "/models/target"
[shared]
attention-backend = "triton"
enable-metrics = true
disable-radix-cache = false
max-running-requests = 48
random-seed = 7
cuda-graph-bs = [1, 2, 4]
[candidate]
speculative-algorithm = "STANDALONE"
speculative-draft-model-path = "/models/draft"
speculative-num-steps = 3
speculative-eagle-topk = 1
speculative-num-draft-tokens = 4
[memory]
baseline = 0.3
candidate = 0.35
[ports]
baseline = 30000
candidate = 30001
[declared]
gpu = "H200"
[launch]
api_key_env = "TEST_LAUNCH_KEY"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pair.toml"
    path.write_text(text)
    return path


def test_both_commands_share_every_shared_arg(tmp_path: Path) -> None:
    """Shared args appear identically in both commands; only port, memory and spec args differ."""
    desc = load_description(_write(tmp_path, GOOD))
    base = desc.command(Role.BASELINE, python="py")
    cand = desc.command(Role.CANDIDATE, python="py")
    shared = ["--attention-backend", "triton", "--enable-metrics", "--max-running-requests", "48",
              "--random-seed", "7", "--cuda-graph-bs", "1", "2", "4"]  # fmt: skip
    for argv in (base, cand):
        start = argv.index("--attention-backend")
        assert argv[start : start + len(shared)] == shared
        assert "--disable-radix-cache" not in argv
    assert base[:3] == ["py", "-m", "sglang.launch_server"]
    assert base[base.index("--port") + 1] == "30000"
    assert cand[cand.index("--port") + 1] == "30001"
    assert cand[cand.index("--mem-fraction-static") + 1] == "0.35"
    assert not any(a.startswith("--speculative") for a in base)
    assert cand[-2:] == ["--speculative-num-draft-tokens", "4"]


def test_render_args_spells_flags_the_sglang_way() -> None:
    """true is a bare flag, false is left out, underscores become dashes, lists repeat values."""
    args = {"enable_metrics": True, "x": False, "cuda-graph-bs": [1, 2], "tp-size": 2}
    assert render_args(args) == ["--enable-metrics", "--cuda-graph-bs", "1", "2", "--tp-size", "2"]


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ('name = "tiny"', 'nmae = "tiny"', "unknown key 'nmae' in the top level"),
        (
            "baseline = 0.3\n",
            "baseline = 0.3\nbaselin = 0.2\n",
            "unknown key 'baselin' in [memory]",
        ),
        ('gpu = "H200"', 'gpu = "H200"\ncolour = "red"', "unknown key 'colour' in [declared]"),
        ('api_key_env = "TEST_LAUNCH_KEY"', 'api-key = "x"', "unknown key 'api-key' in [launch]"),
        ("max-running-requests = 48\n", "", "[shared] must set max-running-requests"),
        ("random-seed = 7\n", "", "[shared] must set random-seed"),
        (
            "[candidate]\n",
            "[baseline]\nspeculative-num-steps = 2\n[candidate]\n",
            "baseline runs without speculation",
        ),
        ("[candidate]\n", "[candidate]\nchunked-prefill-size = 512\n", "not a speculative setting"),
        (
            '[candidate]\nspeculative-algorithm = "STANDALONE"',
            "[candidate]",
            "must set speculative-algorithm",
        ),
        ("[shared]\n", "[shared]\nport = 1\n", "set it in [ports]"),
        ("[shared]\n", "[shared]\nmem-fraction-static = 0.5\n", "set it in [memory]"),
        ("candidate = 30001", "candidate = 30000", "distinct ports"),
        ("candidate = 0.35", "candidate = 1.5", "between 0 and 1"),
        ('path = "/models/target"', "", "[model] path: required"),
        ("validated = false", 'validated = "yes"', "validated: true or false"),
    ],
)
def test_bad_descriptions_are_refused_naming_file_and_key(
    tmp_path: Path, old: str, new: str, words: str
) -> None:
    """Each mistake raises ConfigError with the file and the offending key or table."""
    assert old in GOOD
    path = _write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(ConfigError) as info:
        load_description(path)
    assert str(path) in str(info.value)
    assert words in str(info.value)


def test_dry_run_prints_both_commands_with_the_key_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--dry-run prints two redacted commands, starts nothing and creates no run directory."""
    monkeypatch.setenv("TEST_LAUNCH_KEY", "sk-dry-run-secret")
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, GOOD)
    with pytest.raises(SystemExit) as exit_info:
        main(["launch", str(path), "--dry-run", "--python", "python3.12"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    lines = out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["baseline", "candidate"]
    assert all("python3.12 -m sglang.launch_server" in line for line in lines)
    assert all("--api-key '[redacted]'" in line for line in lines)
    assert "sk-dry-run-secret" not in out
    assert not (tmp_path / "runs").exists()


def test_a_bad_description_exits_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command line turns a description error into exit status 2 with the key named."""
    path = _write(tmp_path, GOOD.replace('name = "tiny"', 'nmae = "tiny"'))
    with pytest.raises(SystemExit) as exit_info:
        main(["launch", str(path), "--dry-run"])
    assert exit_info.value.code == 2
    assert "nmae" in capsys.readouterr().err


def test_placement_keys_may_differ_per_side(tmp_path: Path) -> None:
    """GPU placement and served names may be set per side; other per-side args may not."""
    text = GOOD.replace(
        "[candidate]\n",
        '[baseline]\nbase-gpu-id = 0\n[candidate]\nbase-gpu-id = 4\nserved-model-name = "cand"\n',
    )
    desc = load_description(_write(tmp_path, text))
    cand = desc.command(Role.CANDIDATE)
    assert cand[cand.index("--base-gpu-id") + 1] == "4"
    assert "--served-model-name" not in desc.command(Role.BASELINE)
