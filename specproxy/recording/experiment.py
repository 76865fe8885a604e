"""``experiment.json``: the record of one experiment, rewritten atomically at each transition.

Owns ``RUN_DIR/experiment.json``; reads ``RUN_DIR/launch.json`` (written by the
launcher) but never writes it. Every write goes to a temporary file in the run
directory, is flushed to disk and renamed over the old file, so a reader (or a killed
run) sees either the previous document or the new one, never half of one.

Status transitions::

    (none) ──> not_run ──> running ──> completed | aborted
       │          │
       └──────────┴──> preflight_failed | rejected | aborted | running

``not_run`` may be written several times (the launcher writes it as soon as it knows
the commands, again once the servers report their configuration). A terminal status
(``completed``, ``aborted``, ``preflight_failed``, ``rejected``) is final. A writer
picks up an existing document in its run directory, so a launcher and a later replay
in the same directory continue one record; configs read from servers the launcher
started get the launcher's record from ``launch.json`` (full command, nvidia-smi
facts, environment) merged in.

The lab's experiment-log fields are top level: ``status``, ``baseline.speculation``,
``candidate.algorithm``, ``target_revision``, ``draft_revision``,
``acceptance_metrics``. Launch configs are stored redacted (``core.launch.config``).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from specproxy import __version__
from specproxy.core.launch.command import launch_source
from specproxy.core.launch.config import LaunchConfig, diff_configs, with_launcher
from specproxy.core.records.model import Role, SendMode
from specproxy.errors import ConfigError

FILE_NAME = "experiment.json"
LAUNCH_FILE = "launch.json"
SCHEMA = "specproxy.experiment/1"


class ExperimentStatus(StrEnum):
    """Where an experiment stands (docs/contract.md, Experiment status)."""

    NOT_RUN = "not_run"
    PREFLIGHT_FAILED = "preflight_failed"
    REJECTED = "rejected"
    RUNNING = "running"
    COMPLETED = "completed"
    ABORTED = "aborted"


_S = ExperimentStatus
TERMINAL = frozenset({_S.COMPLETED, _S.ABORTED, _S.PREFLIGHT_FAILED, _S.REJECTED})
_ALLOWED: dict[ExperimentStatus | None, frozenset[ExperimentStatus]] = {
    None: frozenset({_S.NOT_RUN, _S.RUNNING, _S.PREFLIGHT_FAILED, _S.REJECTED, _S.ABORTED}),
    _S.NOT_RUN: frozenset({_S.NOT_RUN, _S.RUNNING, _S.PREFLIGHT_FAILED, _S.REJECTED, _S.ABORTED}),
    _S.RUNNING: frozenset({_S.COMPLETED, _S.ABORTED}),
}


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` through a flushed temp file and a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    with tmp.open("wb") as fh:
        fh.write(data + b"\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _requested_algorithm(config: LaunchConfig) -> str | None:
    """The ``--speculative-algorithm`` of the recorded command (NEXTN stays NEXTN)."""
    argv = (config.data.get("launcher") or {}).get("command") or []
    for index, arg in enumerate(argv):
        if arg == "--speculative-algorithm" and index + 1 < len(argv):
            return str(argv[index + 1]).upper()
        if str(arg).startswith("--speculative-algorithm="):
            return str(arg).split("=", 1)[1].upper()
    return None


def _side(config: LaunchConfig | None, role: Role) -> dict[str, Any]:
    """One side's lab fields; the algorithm is the server's own, else the one requested."""
    if config is None:
        return {"speculation": None, "algorithm": None, "fingerprint": None, "launch": None}
    reported = bool(config.data["server_args"])
    requested = _requested_algorithm(config)
    side: dict[str, Any] = {
        "speculation": config.speculation if reported else None,
        "algorithm": config.speculative_algorithm if reported else requested,
        "requested_algorithm": requested,
        "fingerprint": config.fingerprint,
        "launch_source": launch_source(config),  # where the full command came from
        "launch": config.to_dict(),
    }
    if role is Role.BASELINE and not side["algorithm"]:
        side.pop("algorithm")
    return side


def _revisions(
    baseline: LaunchConfig | None, candidate: LaunchConfig | None
) -> tuple[str | None, str | None]:
    """(target_revision, draft_revision): declared facts first, then what the server reports."""
    target: str | None = None
    for config in (candidate, baseline):
        if config is None:
            continue
        data = config.data
        value = data["facts"].get("target_revision", data["server_args"].get("revision"))
        if value is not None:
            target = str(value)
            break
    draft: str | None = None
    if candidate is not None:
        data = candidate.data
        value = data["facts"].get(
            "draft_revision", data["server_args"].get("speculative_draft_model_revision")
        )
        draft = None if value is None else str(value)
    return target, draft


def acceptance_from_summary(summary: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``summary["acceptance_metrics"]``, the section
    ``core.compare.acceptance.acceptance_metrics`` builds (None when absent, or when no
    request had an accept length)."""
    explicit = (summary or {}).get("acceptance_metrics")
    return dict(explicit) if isinstance(explicit, Mapping) else None


def read_experiment(run_dir: Path | str) -> dict[str, Any]:
    """The parsed ``experiment.json`` of ``run_dir``; ConfigError naming the file if unusable."""
    path = Path(run_dir) / FILE_NAME
    try:
        value = orjson.loads(path.read_bytes())
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: not found (is this a run directory?)") from exc
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return value


def _launch_entry(run_dir: Path | str, role: Role) -> dict[str, Any] | None:
    """``launch.json``'s entry for ``role`` (url, pid, launcher record...), or None.

    Looked for in ``run_dir``, then its parent (a replay or proxy run directory made
    inside the launch's), then ``$SPECPROXY_RUN_DIR`` (set by ``specproxy launch`` for
    the command it runs against the pair). The port check in ``attach_launcher_record``
    keeps a record from being applied to another server.
    """
    places = [Path(run_dir), Path(run_dir).parent]
    if os.environ.get("SPECPROXY_RUN_DIR"):
        places.append(Path(os.environ["SPECPROXY_RUN_DIR"]))
    path = next((p / LAUNCH_FILE for p in places if (p / LAUNCH_FILE).exists()), None)
    if path is None:
        return None
    try:
        doc = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
    entry = (doc.get("servers") or {}).get(str(role))
    return dict(entry) if isinstance(entry, Mapping) else None


def attach_launcher_record(
    run_dir: Path | str, role: Role, config: LaunchConfig | None
) -> LaunchConfig | None:
    """``config`` with the launcher's record for ``role`` merged in, when it is that server.

    Applies only to a config without a launcher record whose reported port is the port
    ``launch.json`` recorded for ``role``; anything else is returned unchanged.
    """
    if config is None or config.data.get("launcher"):
        return config
    entry = _launch_entry(run_dir, role) or {}
    launcher = entry.get("launcher")
    port = config.data["noise"].get("port")
    if not isinstance(launcher, Mapping) or port is None:
        return config
    if urlsplit(str(entry.get("url", ""))).port != port:
        return config
    return with_launcher(config, launcher)


class ExperimentWriter:
    """Writes one run directory's ``experiment.json`` through its status transitions."""

    def __init__(self, run_dir: Path | str, experiment_id: str) -> None:
        if not experiment_id:
            raise ValueError("experiment_id must not be empty")
        self._path = Path(run_dir) / FILE_NAME
        self._doc: dict[str, Any] = self._initial(experiment_id)

    def _initial(self, experiment_id: str) -> dict[str, Any]:
        if self._path.exists():
            doc = read_experiment(self._path.parent)
            doc["experiment_id"] = experiment_id
            return doc
        return {
            "schema": SCHEMA,
            "experiment_id": experiment_id,
            "status": None,
            "specproxy_version": __version__,
            "simulated": False,
            "created_at": _now_iso(),
            "started_at": None,
            "finished_at": None,
            "mode": None,
            "workload": None,
            "sampling": None,
            "baseline": _side(None, Role.BASELINE),
            "candidate": _side(None, Role.CANDIDATE),
            "target_revision": None,
            "draft_revision": None,
            "launch_diff": None,
            "acceptance_metrics": None,
            "summary": None,
            "error": None,
        }

    @property
    def path(self) -> Path:
        return self._path

    @property
    def status(self) -> ExperimentStatus | None:
        value = self._doc.get("status")
        return None if value is None else ExperimentStatus(value)

    def document(self) -> dict[str, Any]:
        """A copy of the document as last written."""
        copy: dict[str, Any] = orjson.loads(orjson.dumps(self._doc))
        return copy

    def _transition(self, status: ExperimentStatus) -> None:
        allowed = _ALLOWED.get(self.status, frozenset())
        if status not in allowed:
            raise ValueError(f"{self._path}: cannot go from {self.status} to {status}")
        self._doc["status"] = str(status)

    def _set_configs(
        self, baseline: LaunchConfig | None, candidate: LaunchConfig | None, simulated: bool
    ) -> None:
        baseline = attach_launcher_record(self._path.parent, Role.BASELINE, baseline)
        candidate = attach_launcher_record(self._path.parent, Role.CANDIDATE, candidate)
        self._doc["baseline"] = _side(baseline, Role.BASELINE)
        self._doc["candidate"] = _side(candidate, Role.CANDIDATE)
        self._doc["target_revision"], self._doc["draft_revision"] = _revisions(baseline, candidate)
        self._doc["launch_diff"] = None  # only when both servers reported their configuration
        if (
            baseline is not None
            and candidate is not None
            and baseline.server_args
            and candidate.server_args
        ):
            self._doc["launch_diff"] = diff_configs(baseline, candidate).to_dict()
        labelled = [c.simulated for c in (baseline, candidate) if c is not None]
        self._doc["simulated"] = bool(simulated or any(labelled) or self._doc.get("simulated"))

    def describe(
        self,
        *,
        baseline: LaunchConfig | None,
        candidate: LaunchConfig | None,
        simulated: bool = False,
    ) -> None:
        """Record the launch configurations before anything runs (status ``not_run``)."""
        self._transition(ExperimentStatus.NOT_RUN)
        self._set_configs(baseline, candidate, simulated)
        write_json_atomic(self._path, self._doc)

    def start(
        self,
        *,
        mode: SendMode,
        workload: Mapping[str, Any],
        sampling: Mapping[str, Any],
        baseline: LaunchConfig | None,
        candidate: LaunchConfig | None,
        simulated: bool,
    ) -> None:
        """Write the experiment with status ``running`` and ``started_at`` now."""
        self._transition(ExperimentStatus.RUNNING)
        self._set_configs(baseline, candidate, simulated)
        self._doc.update(
            mode=str(mode), workload=dict(workload), sampling=dict(sampling), started_at=_now_iso()
        )
        write_json_atomic(self._path, self._doc)

    def finish(
        self,
        status: str,
        *,
        summary: Mapping[str, Any] | None = None,
        error: str | None = None,
        sampling: Mapping[str, Any] | None = None,
    ) -> None:
        """Write a terminal status, ``finished_at`` now, the summary and acceptance metrics.

        ``error`` carries the reason for ``rejected`` (the server's own error text),
        ``preflight_failed`` and ``aborted``. ``sampling``, when given, replaces the
        sampling conditions recorded at start (the proxy only knows them at the end).
        """
        final = ExperimentStatus(status)
        if final not in TERMINAL:
            raise ValueError(f"finish() needs a terminal status, not {status!r}")
        self._transition(final)
        self._doc["finished_at"] = _now_iso()
        if summary is not None:
            self._doc["summary"] = dict(summary)
            self._doc["acceptance_metrics"] = acceptance_from_summary(summary)
        if error is not None:
            self._doc["error"] = error
        if sampling is not None:
            self._doc["sampling"] = dict(sampling)
        write_json_atomic(self._path, self._doc)
