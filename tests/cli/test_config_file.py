"""`--config FILE` on every subcommand: wrong types and stray keys are named, in one line."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from specproxy.cli import group, main
from specproxy.config import build, load_toml_table
from specproxy.errors import ConfigError
from specproxy.replay.config import ReplayConfig
from tests.cli.test_errors import TRACE


def _run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    code = exc.value.code
    return code if isinstance(code, int) else 1


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "conf.toml"
    path.write_text(text)
    return path


def test_every_subcommand_takes_config() -> None:
    """Each registered subcommand has a --config option, as the README says."""
    assert isinstance(group, click.Group)
    ctx = click.Context(group)
    names = group.list_commands(ctx)
    assert len(names) == 9  # check demo launch replay report score serve sim sweep
    for name in names:
        command = group.get_command(ctx, name)
        assert command is not None, name
        flags = {opt for p in command.params for opt in getattr(p, "opts", [])}
        assert "--config" in flags, name


def test_wrong_type_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`rate = "fast"` in [replay] is refused naming the file, the key and the expected type."""
    conf = _write(tmp_path, '[replay]\nrate = "fast"\n')
    assert _run(["replay", TRACE, "--baseline", "http://127.0.0.1:1", "--config", str(conf)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"specproxy: {conf}: rate: expected a number, got 'fast'"


def test_key_outside_the_table_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plain key beside a [replay] table is refused by name instead of being ignored."""
    conf = _write(tmp_path, 'rate = 5\n[replay]\nbaseline = "http://127.0.0.1:1"\n')
    assert _run(["replay", TRACE, "--config", str(conf)]) == 2
    err = capsys.readouterr().err
    assert (
        err.strip() == f"specproxy: {conf}: key 'rate' is outside [replay]; move it into [replay]"
    )


def test_only_other_tables_is_refused(tmp_path: Path) -> None:
    """A file with a [serve] table but none for replay says so, listing the tables it has."""
    conf = _write(tmp_path, "[serve]\nport = 1\n")
    with pytest.raises(ConfigError, match=r"no \[replay\] table .*\[serve\]"):
        load_toml_table(conf, "replay")


def test_unknown_table_is_refused(tmp_path: Path) -> None:
    """A table no subcommand owns is named, while other subcommands' tables may share the file."""
    conf = _write(tmp_path, "[serve]\nport = 1\n[replay]\nlimit = 2\n")
    assert load_toml_table(conf, "replay") == {"limit": 2}
    conf = _write(tmp_path, "[replay]\nlimit = 2\n[replya]\nrate = 1\n")
    with pytest.raises(ConfigError, match=r"unknown table \[replya\]"):
        load_toml_table(conf, "replay")


def test_plain_file_still_works(tmp_path: Path) -> None:
    """A file of top-level keys only is read for any subcommand (ints widen to floats)."""
    conf = _write(tmp_path, 'baseline = "http://127.0.0.1:1"\nrate = 4\ntraces = ["a.jsonl"]\n')
    config = build(ReplayConfig, load_toml_table(conf, "replay"), {}, str(conf))
    assert config.rate == 4.0 and isinstance(config.rate, float)
    assert config.traces == ("a.jsonl",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("limit = 2.5", "limit: expected an integer, got 2.5"),
        ("skip_bad = 1", "skip_bad: expected true or false, got 1"),
        ('declare = "gpu=H100"', "declare: expected a list, got 'gpu=H100'"),
        ("baseline = 3", "baseline: expected a string, got 3"),
    ],
)
def test_types_are_checked(tmp_path: Path, text: str, message: str) -> None:
    """Each kind of wrong value in the file is refused with the key and what was expected."""
    conf = _write(tmp_path, f"[replay]\n{text}\n")
    with pytest.raises(ConfigError) as exc:
        build(ReplayConfig, load_toml_table(conf, "replay"), {"traces": (TRACE,)}, str(conf))
    assert str(exc.value) == f"{conf}: {message}"


def test_check_reads_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`check --config` fills the required URLs from [check]; the command line still wins."""
    conf = _write(
        tmp_path,
        '[check]\nbaseline = "http://127.0.0.1:1"\ncandidate = "127.0.0.1:2"\ntimeout = 1\n',
    )
    assert _run(["check", "--config", str(conf)]) == 2
    assert "--candidate: " in capsys.readouterr().err
    assert _run(["check", "--config", str(conf), "--candidate", "http://127.0.0.1:2"]) == 3
    assert "could not reach: baseline, candidate" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "text", "message"),
    [
        ("check", 'timeout = "soon"', "timeout: 'soon' is not a valid float range."),
        ("demo", 'requests = "many"', "requests: 'many' is not a valid integer."),
        ("check", "bogus = 1", "unknown key 'bogus' in [check]"),
        ("launch", "dry_run = 1", "dry_run: expected true or false, got 1"),
    ],
)
def test_direct_commands_check_their_file(
    tmp_path: Path, command: str, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """check, demo and launch refuse a wrong key or type in their table, naming it."""
    conf = _write(tmp_path, f"[{command}]\n{text}\n")
    extra = [str(tmp_path / "desc.toml")] if command == "launch" else []
    assert _run([command, *extra, "--config", str(conf)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"specproxy: {conf}: {message}")
