"""`specproxy launch`: start a matched pair on one GPU host, record it, stop it cleanly.

Order matters: the baseline starts first and must answer ``/health`` before the
candidate starts, because ``--mem-fraction-static`` is a share of the memory free at
start. Both commands share their args; each server's full command (API key
redacted), the SGLang version, nvidia-smi facts and the inference-relevant
environment go to ``RUN_DIR/launch.json``; output to ``RUN_DIR/logs/<role>.log``.
``experiment.json`` is written ``not_run`` at once, again with both servers' own
launch configs once they are healthy, and ``rejected`` (with the server's error
text) when a server exits before it is healthy.

With a follow-up command (``specproxy launch DESC -- CMD...``) the pair serves until
that command ends, whose exit status becomes ours; without one, until SIGINT or
SIGTERM. Either way both servers are stopped (candidate first) before returning.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specproxy.backends.base import BackendSpec
from specproxy.backends.http import open_backend
from specproxy.backends.sglang import fetch_launch_config
from specproxy.core.launch.config import build_launch_config, redact_argv
from specproxy.core.records.model import Role
from specproxy.errors import BackendError, ConfigError, LaunchRejected, SpecproxyError
from specproxy.launch.description import LaunchDescription
from specproxy.launch.host import gpu_facts, python_facts, recorded_env
from specproxy.launch.process import HealthOutcome, ServerProcess
from specproxy.recording.experiment import TERMINAL, ExperimentWriter, write_json_atomic
from specproxy.runtime import install_stop_signals, spawn

LAUNCH_SCHEMA = "specproxy.launch/1"


class LaunchEnded(SpecproxyError):
    """The pair was stopped with a non-zero status: the follow-up command's, or 130 on a signal."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.exit_code = code if 0 < code < 256 else 1


class _Interrupted(Exception):
    """SIGINT/SIGTERM arrived while the pair was starting."""


@dataclass(frozen=True, slots=True)
class PairReady:
    """Handed to ``on_ready``: where the two servers listen and where the run is recorded."""

    baseline_url: str
    candidate_url: str
    run_dir: Path


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Launch:
    """State of one `specproxy launch` (owned by ``launch_pair``)."""

    def __init__(
        self, desc: LaunchDescription, run_dir: Path, experiment_id: str, python: str | None
    ) -> None:
        self.desc = desc
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.python = python or desc.python
        self.key = desc.api_key()
        self.env = {**os.environ, **desc.env}
        self.servers: dict[Role, ServerProcess] = {}
        self.writer = ExperimentWriter(run_dir, experiment_id)
        self.doc: dict[str, Any] = {
            "schema": LAUNCH_SCHEMA,
            "state": "starting",
            "started_at": _now(),
            "servers": {},
        }

    def save(self, **changes: Any) -> None:
        self.doc.update(changes)
        write_json_atomic(self.run_dir / "launch.json", self.doc)

    def launcher_record(self, role: Role, host: Mapping[str, Any]) -> dict[str, Any]:
        argv = self.desc.command(role, python=self.python, api_key=self.key)
        return {
            "command": redact_argv(argv),
            "sglang_version": host.get("sglang_version"),
            "python": host.get("python"),
            "gpu": host.get("gpu"),
            "env": recorded_env(self.env),
            "description": self.desc.name,
        }

    async def record_host(self) -> dict[str, Any]:
        facts = await python_facts(self.python)
        facts["gpu"], facts["gpu_error"] = await gpu_facts()
        self.save(
            description={
                "source": self.desc.source,
                "name": self.desc.name,
                "validated": self.desc.validated,
            },
            host=facts,
        )
        for role in Role:
            record = self.launcher_record(role, facts)
            self.doc["servers"][str(role)] = {
                "url": self.desc.url(role),
                "log": f"logs/{role}.log",
                "state": "pending",
                "launcher": record,
            }
        self.save()
        try:
            self.writer.describe(
                baseline=self._bare(Role.BASELINE), candidate=self._bare(Role.CANDIDATE)
            )
        except ValueError as exc:  # the run directory holds an experiment that has ended
            raise ConfigError(f"{exc}; use a new run directory") from exc
        return facts

    def _bare(self, role: Role) -> Any:
        record = self.doc["servers"][str(role)]["launcher"]
        return build_launch_config(None, launcher=record, declared=self.desc.declared)

    def end_experiment(self, error: str) -> None:
        """Mark the experiment aborted, unless it already ended (e.g. ``rejected``)."""
        if self.writer.status not in TERMINAL:
            self.writer.finish("aborted", error=error)

    def _server_state(self, role: Role, **changes: Any) -> None:
        self.doc["servers"][str(role)].update(changes)
        self.save()

    async def start_one(self, role: Role, stop: asyncio.Event) -> None:
        argv = self.desc.command(role, python=self.python, api_key=self.key)
        log_path = self.run_dir / "logs" / f"{role}.log"
        try:
            server = await ServerProcess.start(
                str(role), argv, log_path=log_path, env=self.env, secrets=[self.key or ""]
            )
        except OSError as exc:
            raise ConfigError(f"cannot start the {role} server ({argv[0]}): {exc}") from exc
        self.servers[role] = server
        self._server_state(role, pid=server.pid, state="starting")
        health = spawn(
            server.wait_healthy(self.desc.url(role), timeout_s=self.desc.health_timeout_s),
            name=f"health-{role}",
        )
        stopped = spawn(stop.wait(), name=f"stop-watch-{role}")
        await asyncio.wait({health, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not health.done():
            health.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await health
            raise _Interrupted
        if health.result() is HealthOutcome.EXITED:
            await self.reject(role, server)
        self._server_state(role, state="healthy", healthy_at=_now())

    async def reject(self, role: Role, server: ServerProcess) -> None:
        code = await server.wait_exit()
        excerpt = server.error_excerpt()
        self._server_state(role, state="rejected", exit_code=code, error=excerpt)
        self.save(state="rejected")
        self.writer.finish(
            "rejected",
            error=f"{role} server exited with status {code} before it was healthy: {excerpt}",
        )
        raise LaunchRejected(
            f"the {role} server refused its configuration (exit status {code}): {excerpt}",
            server_error=excerpt,
        )

    async def record_configs(self) -> None:
        configs = {}
        for role in Role:
            record = self.doc["servers"][str(role)]["launcher"]
            spec = BackendSpec(self.desc.url(role), role, api_key=self.key)
            async with open_backend(spec) as server:
                configs[role] = await fetch_launch_config(
                    server, declared=self.desc.declared, launcher=record
                )
            self.doc["servers"][str(role)]["fingerprint"] = configs[role].fingerprint
        self.writer.describe(baseline=configs[Role.BASELINE], candidate=configs[Role.CANDIDATE])
        gpu, _ = await gpu_facts()
        self.save(state="ready", ready_at=_now(), gpu_after_ready=gpu)

    async def stop_all(self) -> None:
        for role in (Role.CANDIDATE, Role.BASELINE):
            server = self.servers.get(role)
            if server is None:
                continue
            code = await server.stop(timeout_s=self.desc.stop_timeout_s)
            entry = self.doc["servers"][str(role)]
            entry.setdefault("exit_code", code)
            if entry.get("state") != "rejected":
                entry["state"] = "stopped"
        if self.doc.get("state") not in ("rejected", "failed"):
            self.doc["state"] = "stopped"
        self.save(stopped_at=_now())


async def _start_command(launch: _Launch, then: Sequence[str]) -> asyncio.subprocess.Process:
    env = {
        **launch.env,
        "SPECPROXY_BASELINE_URL": launch.desc.url(Role.BASELINE),
        "SPECPROXY_CANDIDATE_URL": launch.desc.url(Role.CANDIDATE),
        "SPECPROXY_RUN_DIR": str(launch.run_dir),
    }
    try:
        return await asyncio.create_subprocess_exec(*then, env=env)
    except OSError as exc:
        raise ConfigError(f"cannot run the command after --: {then[0]}: {exc}") from exc


async def _end_command(proc: asyncio.subprocess.Process, timeout_s: float) -> None:
    """SIGTERM to the follow-up command, wait up to ``timeout_s``, then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        async with asyncio.timeout(timeout_s):
            await proc.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


async def _serve(launch: _Launch, stop: asyncio.Event, then: Sequence[str]) -> int:
    """Wait for the follow-up command, a stop signal, or a server's death; returns the status."""
    proc = await _start_command(launch, then) if then else None
    waits: dict[asyncio.Task[Any], str] = {
        spawn(stop.wait(), name="launch-stop"): "stop",
        **{spawn(s.wait_exit(), name=f"exit-{r}"): str(r) for r, s in launch.servers.items()},
    }
    if proc is not None:
        waits[spawn(proc.wait(), name="launch-command")] = "command"
    done, _ = await asyncio.wait(set(waits), return_when=asyncio.FIRST_COMPLETED)
    for task in waits:
        if task not in done:
            task.cancel()
    which = waits[next(iter(done))]
    if proc is not None and proc.returncode is None:
        await _end_command(proc, launch.desc.stop_timeout_s)
    if which == "command" and proc is not None:
        return proc.returncode or 0
    if which in (str(Role.BASELINE), str(Role.CANDIDATE)):
        launch.save(state="failed")
        log = launch.run_dir / "logs" / f"{which}.log"
        raise BackendError(f"the {which} server exited while serving; see {log}")
    return 0


async def launch_pair(
    desc: LaunchDescription,
    run_dir: Path,
    *,
    experiment_id: str,
    python: str | None = None,
    then: Sequence[str] = (),
    on_ready: Callable[[PairReady], None] | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """Start, record, serve and stop a matched pair; returns the follow-up command's status.

    Raises LaunchRejected (a server refused its configuration), BackendTimeout (not
    healthy in time) or BackendError (a server died while serving); both servers are
    stopped in every case.
    """
    stop = stop or asyncio.Event()
    remove_signals = install_stop_signals(stop)
    launch = _Launch(desc, run_dir, experiment_id, python)
    try:
        await _start_pair(launch, stop)
        if on_ready is not None:
            on_ready(PairReady(desc.url(Role.BASELINE), desc.url(Role.CANDIDATE), run_dir))
        code = await _serve(launch, stop, then)
    finally:
        remove_signals()
        await launch.stop_all()
    if code:
        raise LaunchEnded(f"the command run against the pair exited with status {code}", code)
    return code


async def _start_pair(launch: _Launch, stop: asyncio.Event) -> None:
    """Record the host, start both servers in turn, record their configs.

    Failures before serving end the experiment record (``rejected`` is written by
    ``reject``; a timeout or an unusable server is ``aborted``). Once serving, the
    follow-up command may own ``experiment.json``, so nothing here writes it again.
    """
    try:
        await launch.record_host()
        for role in Role:
            await launch.start_one(role, stop)
        await launch.record_configs()
    except _Interrupted:
        launch.end_experiment("interrupted while the servers were starting")
        raise LaunchEnded("interrupted while the servers were starting", 130) from None
    except (BackendError, ConfigError) as exc:
        launch.save(state="failed")
        launch.end_experiment(str(exc))
        raise
