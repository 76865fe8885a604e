"""The setting sweep: one speculative setting at a time, the baseline kept up.

The walk: for each ``--vary KEY=V1,V2,...`` in order, each value in order, with every
other key at the launcher's own value (a grid is walked one key at a time, never as a
product). For each value the candidate is started alone (``ServerProcess``); a server
that exits before it is healthy is a ``rejected`` experiment carrying the server's own
error (``ServerProcess.error_excerpt``); a candidate that fails the preflight
(``launch.preflight.run_preflight``) is ``preflight_failed`` with the failed checks; in
both cases the sweep goes on with the next value. An accepted value runs the whole
load ladder (``sweep.ladder``) in ``DIR/<KEY>=<V>/`` and its candidate is stopped
before the next one starts. With ``--fresh-prompts`` one trace cursor serves every value, so
the kept baseline is never sent a prompt twice (the trace must hold enough requests for
every value's ladder; once it is used up the open levels close).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from specproxy.backends.base import BackendSpec
from specproxy.core.launch.config import build_launch_config, redact_argv
from specproxy.core.records.model import Role
from specproxy.errors import LaunchRejected
from specproxy.launch.preflight import PreflightOutcome, run_preflight
from specproxy.launch.process import HealthOutcome, ServerProcess
from specproxy.recording.experiment import ExperimentWriter
from specproxy.recording.rundir import new_experiment_id
from specproxy.sweep.config import SweepConfig
from specproxy.sweep.ladder import LevelRun, Targets, TraceCursor, run_ladder
from specproxy.sweep.launchers import ServerCommand, SettingLauncher

_SLUG = re.compile(r"[^A-Za-z0-9_.=-]+")
_ERROR_WORD = re.compile(r"(?i)error")


@dataclass(frozen=True, slots=True)
class Setting:
    """One value of the walk: ``{key: value}`` and its folder name."""

    values: dict[str, str]

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.values.items())

    @property
    def slug(self) -> str:
        return _SLUG.sub("_", self.label) or "setting"


def walk(vary: Sequence[tuple[str, tuple[str, ...]]]) -> Iterator[Setting]:
    """Each value of each key, one key at a time (see the module docstring)."""
    for key, values in vary:
        for value in values:
            yield Setting({key: value})


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a value was not run: ``rejected`` or ``preflight_failed`` and the error text."""

    status: str
    error: str


def launch_diff(
    previous: dict[str, str] | None, current: dict[str, str]
) -> list[dict[str, str | None]]:
    """The candidate's launch args that changed since the previous value (none before the first)."""
    if previous is None:
        return []
    keys = sorted(set(previous) | set(current))
    return [
        {"key": k, "from": previous.get(k), "to": current.get(k)}
        for k in keys
        if previous.get(k) != current.get(k)
    ]


async def start_server(
    name: str, command: ServerCommand, folder: Path, *, timeout_s: float
) -> tuple[ServerProcess, str | None]:
    """Start and wait for health; the error text is set when it exited before healthy."""
    server = await ServerProcess.start(
        name, command.argv, log_path=folder / "logs" / f"{name}.log", env=command.env,
        secrets=command.secrets,
    )  # fmt: skip
    outcome = await server.wait_healthy(command.url, timeout_s=timeout_s, poll_s=0.2)
    if outcome is HealthOutcome.EXITED:
        code = await server.wait_exit()
        log_path = folder / "logs" / f"{name}.log"
        return server, f"exit status {code}: {server_error(server.error_excerpt(), log_path)}"
    return server, None


def server_error(excerpt: str, log_path: Path) -> str:
    """The server's own error: ``excerpt`` (a Python error line, or the last lines), led by the
    log's last line that says ``error`` when the excerpt has none (llama.cpp's argument
    errors, followed by the option's usage text)."""
    if _ERROR_WORD.search(excerpt):
        return excerpt
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-200:]
    except OSError:
        return excerpt
    said = [line.strip() for line in lines if _ERROR_WORD.search(line)]
    return f"{said[-1]}\n{excerpt}" if said else excerpt


def _failed_checks(outcome: PreflightOutcome) -> str:
    if outcome.unreachable:
        return f"could not reach: {', '.join(outcome.unreachable)}"
    rows = [f"{c.name}({c.side}): {c.detail}" if c.side else f"{c.name}: {c.detail}"
            for c in outcome.failed]  # fmt: skip
    return "preflight failed: " + "; ".join(rows)


def record_refusal(folder: Path, base: ServerCommand, cand: ServerCommand, refusal: Refusal) -> str:
    """A ``rejected``/``preflight_failed`` experiment.json in ``folder``; returns its id."""
    experiment_id = new_experiment_id()
    writer = ExperimentWriter(folder, experiment_id)
    configs = {
        role: build_launch_config(None, launcher={"command": redact_argv(list(c.argv))})
        for role, c in ((Role.BASELINE, base), (Role.CANDIDATE, cand))
    }
    writer.describe(baseline=configs[Role.BASELINE], candidate=configs[Role.CANDIDATE])
    writer.finish(refusal.status, error=refusal.error)
    return experiment_id


@dataclass(slots=True)
class SettingResult:
    """What one value gave: its levels, or the refusal; and the launch diff to the previous."""

    setting: Setting
    folder: Path
    candidate_args: dict[str, str]
    launch_diff: list[dict[str, str | None]]
    levels: list[LevelRun]
    refusal: Refusal | None = None
    experiment_id: str | None = None


async def run_value(
    cfg: SweepConfig, launcher: SettingLauncher, base: ServerCommand, result: SettingResult, *,
    stop: asyncio.Event, on_batch: Callable[[list[LevelRun]], None], progress: TextIO | None,
    notify: Callable[[str], None] | None = None, cursor: TraceCursor | None = None,
) -> None:  # fmt: skip
    """Start the value's candidate, check it, run the ladder, stop it (module docstring);
    ``cursor``: the sweep's one trace cursor (``--fresh-prompts``), shared by every value."""
    command = launcher.candidate(result.setting.values)
    server, error = await start_server(
        "candidate", command, result.folder, timeout_s=launcher.health_timeout_s
    )
    try:
        refusal = Refusal("rejected", error) if error is not None else None
        key = cfg.api_key or (command.secrets[0] if command.secrets else None)
        if refusal is None:
            outcome = await run_preflight(
                BackendSpec(base.url, Role.BASELINE, launcher.kind, key),
                BackendSpec(command.url, Role.CANDIDATE, launcher.kind, key),
            )
            if outcome.failed or outcome.unreachable:
                refusal = Refusal("preflight_failed", _failed_checks(outcome))
        if refusal is not None:
            result.refusal = refusal
            result.experiment_id = record_refusal(result.folder, base, command, refusal)
            return
        targets = Targets(base.url, command.url)
        if cfg.api_key is None and command.secrets:  # the description's key, for the replays
            cfg = dataclasses.replace(cfg, api_key=command.secrets[0])
        result.levels = await run_ladder(
            cfg, targets, result.folder, stop=stop, progress=progress,
            on_batch=on_batch, notify=notify, cursor=cursor,
        )  # fmt: skip
    finally:
        await server.stop(timeout_s=launcher.stop_timeout_s)


async def start_baseline(
    launcher: SettingLauncher, root: Path
) -> tuple[ServerProcess, ServerCommand]:
    """The sweep's one baseline; LaunchRejected with its own error when it will not start."""
    command = launcher.baseline()
    server, error = await start_server(
        "baseline", command, root, timeout_s=launcher.health_timeout_s
    )
    if error is not None:
        await server.stop(timeout_s=launcher.stop_timeout_s)
        raise LaunchRejected(f"the baseline server refused its configuration ({error})",
                             server_error=error)  # fmt: skip
    return server, command
