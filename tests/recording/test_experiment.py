"""experiment.json: lab fields, status transitions, atomic rewrites, reading back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specproxy import __version__
from specproxy.core.launch.config import LaunchConfig, build_launch_config
from specproxy.core.records.model import SendMode
from specproxy.errors import ConfigError
from specproxy.recording.experiment import (
    ExperimentWriter,
    acceptance_from_summary,
    read_experiment,
)
from tests.launch.captures import model_info, server_info

SECRET = "sk-never-in-experiment-json"


def _config(server: str, **changes: object) -> LaunchConfig:
    info = server_info(server)
    info.update(changes)
    return build_launch_config(info, model_info=model_info(server), declared={"gpu": "H200"})


def _start(writer: ExperimentWriter, **kw: object) -> None:
    args: dict[str, object] = {
        "mode": SendMode.MIRROR,
        "workload": {"traces": ["t.jsonl"], "rate": 2.0},
        "sampling": {"temperature": 0.0},
        "baseline": _config("base", api_key=SECRET),
        "candidate": _config("sa_copy", api_key=SECRET),
        "simulated": False,
    }
    args.update(kw)
    writer.start(**args)  # type: ignore[arg-type]


def test_start_writes_the_lab_fields_with_status_running(tmp_path: Path) -> None:
    """start() writes status running, both sides' lab fields, fingerprints, revisions and diff."""
    writer = ExperimentWriter(tmp_path, "exp123")
    _start(writer)
    doc = read_experiment(tmp_path)
    assert doc["status"] == "running"
    assert doc["experiment_id"] == "exp123"
    assert doc["specproxy_version"] == __version__
    assert doc["baseline"]["speculation"] is False
    assert doc["candidate"]["speculation"] is True
    assert doc["candidate"]["algorithm"] == "STANDALONE"
    assert doc["candidate"]["fingerprint"] == doc["candidate"]["launch"]["fingerprint"]
    assert doc["target_revision"] is None
    assert doc["draft_revision"] == "main"
    assert doc["mode"] == "mirror"
    assert doc["workload"]["rate"] == 2.0
    assert doc["sampling"] == {"temperature": 0.0}
    assert doc["started_at"].endswith("Z")
    assert doc["finished_at"] is None
    assert doc["simulated"] is False
    assert doc["launch_diff"]["matched"] is False
    assert SECRET not in (tmp_path / "experiment.json").read_text()
    assert LaunchConfig.from_dict(doc["candidate"]["launch"]) == _config("sa_copy", api_key=SECRET)


def test_finish_completed_fills_acceptance_metrics_from_the_summary(tmp_path: Path) -> None:
    """finish('completed', summary=...) records finished_at, summary and acceptance metrics."""
    writer = ExperimentWriter(tmp_path, "exp1")
    _start(writer)
    section = {"mean_accept_length": 1.45, "requests_with_acceptance": 9}
    summary = {"verdict": "faster", "acceptance_metrics": section}
    writer.finish("completed", summary=summary)
    doc = read_experiment(tmp_path)
    assert doc["status"] == "completed"
    assert doc["finished_at"] is not None
    assert doc["acceptance_metrics"] == section
    assert doc["summary"]["verdict"] == "faster"


def test_an_explicit_acceptance_section_is_taken_as_is() -> None:
    """A summary that already carries acceptance_metrics keeps exactly that section."""
    section = {"mean_accept_length": 2.0, "source": "meta_info"}
    assert acceptance_from_summary({"acceptance_metrics": section, "accept_x": 1}) == section
    assert acceptance_from_summary({"p50": 1, "accept_length_mean": 2.0}) is None
    assert acceptance_from_summary(None) is None


def test_a_rejected_launch_records_the_server_error(tmp_path: Path) -> None:
    """not_run then rejected keeps the server's error text and the incomplete configs."""
    writer = ExperimentWriter(tmp_path, "exp2")
    bare = build_launch_config(
        None, launcher={"command": ["python3", "-m", "sglang.launch_server"]}
    )
    writer.describe(baseline=_config("base"), candidate=bare)
    assert read_experiment(tmp_path)["status"] == "not_run"
    error = "AssertionError: speculative_num_steps must be set"
    writer.finish("rejected", error=error)
    doc = read_experiment(tmp_path)
    assert doc["status"] == "rejected"
    assert doc["error"] == error
    assert doc["candidate"]["speculation"] is None
    assert doc["launch_diff"] is None  # a diff needs both servers' own reports


@pytest.mark.parametrize(
    ("first", "then"),
    [("completed", "running"), ("rejected", "not_run"), ("aborted", "completed")],
)
def test_terminal_statuses_are_final(tmp_path: Path, first: str, then: str) -> None:
    """Once an experiment ended, no later write may change its status."""
    writer = ExperimentWriter(tmp_path, "exp3")
    if first == "completed":
        _start(writer)
    writer.finish(first)
    attempts = {
        "running": lambda: _start(writer),
        "not_run": lambda: writer.describe(baseline=None, candidate=None),
        "completed": lambda: writer.finish(then),
    }
    with pytest.raises(ValueError, match="cannot go from"):
        attempts[then]()
    assert read_experiment(tmp_path)["status"] == first


def test_running_can_only_end_completed_or_aborted(tmp_path: Path) -> None:
    """A running experiment cannot become preflight_failed, and finish() refuses 'running'."""
    writer = ExperimentWriter(tmp_path, "exp4")
    _start(writer)
    with pytest.raises(ValueError, match="cannot go from running"):
        writer.finish("preflight_failed")
    with pytest.raises(ValueError, match="terminal"):
        writer.finish("running")
    writer.finish("aborted", error="SIGTERM")
    assert read_experiment(tmp_path)["error"] == "SIGTERM"


def test_a_second_writer_continues_the_launchers_document(tmp_path: Path) -> None:
    """A writer opened on a run dir with a not_run document continues it (created_at kept)."""
    first = ExperimentWriter(tmp_path, "launch-id")
    first.describe(baseline=_config("base"), candidate=_config("sa_copy"))
    created = read_experiment(tmp_path)["created_at"]
    second = ExperimentWriter(tmp_path, "replay-id")
    assert second.status is not None
    _start(second)
    doc = read_experiment(tmp_path)
    assert (doc["created_at"], doc["experiment_id"], doc["status"]) == (
        created,
        "replay-id",
        "running",
    )


def test_simulated_servers_label_the_experiment(tmp_path: Path) -> None:
    """A simulated server's config marks the experiment simulated even if the caller said not."""
    writer = ExperimentWriter(tmp_path, "exp5")
    _start(writer, candidate=_config("sa_copy", simulated=True), simulated=False)
    assert read_experiment(tmp_path)["simulated"] is True


def test_writes_leave_no_temporary_files_behind(tmp_path: Path) -> None:
    """Each write replaces experiment.json through a rename; nothing else is left in the dir."""
    writer = ExperimentWriter(tmp_path, "exp6")
    _start(writer)
    writer.finish("completed", summary={})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["experiment.json"]
    json.loads((tmp_path / "experiment.json").read_text())


def test_reading_a_missing_or_broken_file_names_it(tmp_path: Path) -> None:
    """read_experiment raises ConfigError naming experiment.json when absent or not JSON."""
    with pytest.raises(ConfigError, match=r"experiment\.json"):
        read_experiment(tmp_path)
    (tmp_path / "experiment.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        read_experiment(tmp_path)


def test_configs_of_launched_servers_get_the_launchers_record(tmp_path: Path) -> None:
    """A config whose port matches launch.json gets the recorded command; another port does not."""
    command = ["python3", "-m", "sglang.launch_server", "--port", "30000", "--random-seed", "7"]
    servers = {
        "baseline": {"url": "http://127.0.0.1:30000", "launcher": {"command": command}},
        "candidate": {"url": "http://127.0.0.1:30005", "launcher": {"command": command}},
    }
    (tmp_path / "launch.json").write_text(json.dumps({"servers": servers}))
    writer = ExperimentWriter(tmp_path, "exp7")
    _start(writer, baseline=_config("base", port=30000), candidate=_config("sa_copy", port=30001))
    doc = read_experiment(tmp_path)
    assert doc["baseline"]["launch"]["launcher"]["command"] == command
    assert doc["baseline"]["launch"]["random_seed_explicit"] is True
    assert doc["candidate"]["launch"]["launcher"] is None


def test_a_run_directory_inside_the_launch_directory_finds_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay or proxy run made inside (or named by $SPECPROXY_RUN_DIR) gets the launch record."""
    command = ["python3", "-m", "sglang.launch_server", "--port", "30000"]
    servers = {"baseline": {"url": "http://127.0.0.1:30000", "launcher": {"command": command}}}
    (tmp_path / "launch.json").write_text(json.dumps({"servers": servers}))
    inner = tmp_path / "replay-alternate"
    inner.mkdir()
    writer = ExperimentWriter(inner, "exp8")
    _start(writer, baseline=_config("base", port=30000), candidate=_config("sa_copy", port=30001))
    assert read_experiment(inner)["baseline"]["launch"]["launcher"]["command"] == command
    elsewhere = tmp_path / "a" / "b"
    elsewhere.mkdir(parents=True)
    monkeypatch.setenv("SPECPROXY_RUN_DIR", str(tmp_path))
    writer = ExperimentWriter(elsewhere, "exp9")
    _start(writer, baseline=_config("base", port=30000), candidate=_config("sa_copy", port=30001))
    assert read_experiment(elsewhere)["baseline"]["launch"]["launcher"]["command"] == command
