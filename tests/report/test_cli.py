"""`specproxy report` through the real command-line entry point."""

from __future__ import annotations

from pathlib import Path

import pytest

from specproxy.cli import main
from specproxy.testing.fabricate import experiment, make_records, write_run_dir


def _run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    code = exc.value.code
    return code if isinstance(code, int) else 1


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run_dir(
        tmp_path / "run", make_records(n_pairs=60, true_ratio=0.8), experiment(simulated=True)
    )


def test_report_prints_text(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`specproxy report RUN_DIR` prints the text report and exits 0."""
    assert _run(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "Verdict (SIMULATED): FASTER" in out


def test_report_writes_chosen_format(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--format md --out DIR writes report.md there and prints its path."""
    out_dir = tmp_path / "out"
    assert _run(["report", str(run_dir), "--format", "md", "--out", str(out_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(out_dir / "report.md")
    assert (out_dir / "report.md").read_text().startswith("# [SIMULATED]")


def test_report_merges_run_dirs_and_reads_config(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two run dirs merge; a [report] table sets the margin."""
    other = write_run_dir(
        tmp_path / "run2",
        make_records(n_pairs=60, experiment_id="exp2"),
        experiment(simulated=True),
    )
    config = tmp_path / "report.toml"
    config.write_text("[report]\nmargin = 0.1\nformat = 'json'\n")
    assert _run(["report", str(run_dir), str(other), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert '"margin": 0.1' in out
    assert '"pairs": 120' in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["report", "/nonexistent/run"], "not a directory"),
        (["report", "{run}", "--margin", "0.7"], "margin"),
        (["report", "{run}", "--format", "pdf"], "pdf"),
    ],
)
def test_report_usage_errors_exit_2(
    run_dir: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing run dir, a bad margin or an unknown format exits 2 and names the problem."""
    argv = [a.replace("{run}", str(run_dir)) for a in args]
    assert _run(argv) == 2
    assert message in capsys.readouterr().err


def test_report_config_rejects_unknown_key(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown key in the [report] table exits 2 naming the key and file."""
    config = tmp_path / "bad.toml"
    config.write_text("[report]\nmargn = 0.1\n")
    assert _run(["report", str(run_dir), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "margn" in err and "bad.toml" in err
