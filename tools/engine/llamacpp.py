"""A real speculative-decoding engine on the CPU: llama.cpp's ``llama-server`` on loopback.

Used by the engine tests and by anyone who wants a real baseline/candidate pair without a
GPU. ``ensure_engine()`` builds (``llamacpp_build``) and generates models
(``llamacpp_models``) into the engine cache, outside the repository; ``start_pair()``
starts a baseline and two speculative servers (exact-copy draft: ~100 % greedy acceptance;
unrelated small draft: ~0 %) and stops them on exit.

Ownership: this module starts ``llama-server`` processes and stops exactly those, by their
``Popen`` handle, never by name. Every server binds 127.0.0.1, runs one thread (``-t 1``:
two servers spinning OpenMP threads on two cores slow each other ~30x) and one slot.
Speculation needs both ``-md`` and ``--spec-type draft-simple``; either alone quietly
serves as a baseline, so each start checks ``/slots[*].speculative`` against what was asked.

Command line: ``python -m tools.engine.llamacpp build | models | serve``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import click

from specproxy.sweep.launchers import free_port
from tools.engine.llamacpp_build import (
    CACHE_ENV,
    EngineError,
    Progress,
    cache_root,
    engine_dir,
    ensure_server,
    server_binary,
)
from tools.engine.llamacpp_models import generator_hash, make_models

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
SERVED_MODEL_NAME = "target"  # every server answers to this model name (`-a`)


def _quiet(_message: str) -> None:
    """A progress sink that drops messages."""


@dataclass(frozen=True, slots=True)
class EnginePaths:
    """Where the built server and the generated models are (both in the engine cache)."""

    server_bin: Path
    models_dir: Path

    def __post_init__(self) -> None:
        if not self.server_bin.name.startswith("llama-server"):
            raise ValueError(f"not a llama-server binary: {self.server_bin}")

    def model(self, name: str) -> Path:
        """``target``, ``draft-same``, ``draft-small`` or ``draft-noisy`` -> its GGUF path."""
        path = self.models_dir / f"{name}.gguf"
        if not path.exists():
            raise EngineError(f"no model {name!r} in {self.models_dir}")
        return path


def models_dir(root: Path | None = None) -> Path:
    """The models folder for this generator version (keyed on the generator's source)."""
    return (root or cache_root()) / f"models-{generator_hash()}"


def ensure_models(*, root: Path | None = None, progress: Progress = _quiet) -> Path:
    """The generated models, made first (about 1.5 s, pure Python, 82 MB) when missing."""
    folder = models_dir(root)
    if (folder / "models.json").exists():
        return folder
    progress(f"generating the GGUF models (tiny set and speed-up pair) in {folder}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="models.", dir=folder.parent))
    make_models(staging)
    with contextlib.suppress(OSError):  # a concurrent maker may have won: keep theirs
        staging.rename(folder)
    if not (folder / "models.json").exists():
        raise EngineError(f"models were not generated in {folder}")
    if staging.exists():  # the rename lost: drop our copy
        shutil.rmtree(staging)
    return folder


def find_engine(root: Path | None = None) -> EnginePaths | None:
    """The built engine when the binary exists (models are made on demand), else None."""
    binary = server_binary(engine_dir(root))
    if not binary.exists():
        return None
    return EnginePaths(server_bin=binary, models_dir=ensure_models(root=root))


def ensure_engine(
    *, root: Path | None = None, jobs: int = 2, progress: Progress = _quiet
) -> EnginePaths:
    """The engine, built (about 5 minutes on 2 cores) and models made when missing."""
    binary = ensure_server(root=root, jobs=jobs, progress=progress)
    return EnginePaths(server_bin=binary, models_dir=ensure_models(root=root, progress=progress))


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """One llama-server to start: the model, an optional draft and the speculative settings."""

    name: str
    model: Path
    draft: Path | None = None
    draft_max: int = 8
    draft_min: int = 1
    threads: int = 1
    slots: int = 1
    context_tokens: int = 4096
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name must not be empty")
        if not 1 <= self.draft_min <= self.draft_max:
            raise ValueError(
                f"need 1 <= draft_min <= draft_max, got {self.draft_min}, {self.draft_max}"
            )
        if self.threads < 1 or self.slots < 1 or self.context_tokens < 64:
            raise ValueError("threads and slots must be >= 1 and context_tokens >= 64")

    @property
    def speculative(self) -> bool:
        return self.draft is not None

    def argv(self, binary: Path, port: int) -> list[str]:
        """The full command line; the host is always loopback."""
        argv = [str(binary), "--host", "127.0.0.1", "--port", str(port)]
        argv += ["-m", str(self.model), "-c", str(self.context_tokens), "-np", str(self.slots)]
        argv += ["-t", str(self.threads), "--metrics", "--no-webui", "-a", SERVED_MODEL_NAME]
        if self.draft is not None:
            argv += ["-md", str(self.draft), "--spec-type", "draft-simple"]
            argv += ["--spec-draft-n-max", str(self.draft_max)]
            argv += ["--spec-draft-n-min", str(self.draft_min)]
        return argv + list(self.extra_args)


@dataclass(slots=True)
class RunningServer:
    """A started llama-server: its spec, base URL, command, log file and process handle."""

    spec: ServerSpec
    url: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then SIGKILL after ``timeout_s``; returns the exit status."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout_s)
        return self.process.returncode


def get_json(url: str, timeout_s: float = 5.0) -> Any:
    """GET ``url`` (loopback only) and decode its JSON body."""
    if not url.startswith("http://127.0.0.1:"):
        raise EngineError(f"refusing a non-loopback engine URL: {url}")
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - loopback http
        return json.loads(response.read())


def _wait_ready(server: RunningServer, deadline_s: float) -> bool:
    """Poll ``/health`` until 200; False when the process exited first (e.g. port taken)."""
    while time.monotonic() < deadline_s:
        if server.process.poll() is not None:
            return False
        with contextlib.suppress(OSError, ValueError):
            if get_json(f"{server.url}/health", timeout_s=1.0).get("status") == "ok":
                return True
        time.sleep(0.02)  # polling a child's readiness; there is no event to wait on
    raise EngineError(
        f"{server.spec.name}: not ready within {READY_TIMEOUT_S:.0f} s; see {server.log_path}"
    )


def check_speculation(server: RunningServer) -> None:
    """Raise EngineError unless every slot's ``speculative`` flag matches the spec."""
    slots = get_json(f"{server.url}/slots")
    flags = {bool(slot.get("speculative")) for slot in slots}
    if flags != {server.spec.speculative}:
        state = "on" if server.spec.speculative else "off"
        raise EngineError(
            f"{server.spec.name}: speculation should be {state} but /slots says {sorted(flags)}; "
            f"see {server.log_path}"
        )


def start_server(
    binary: Path, spec: ServerSpec, *, log_dir: Path, attempts: int = 3
) -> RunningServer:
    """Start ``spec`` on a free loopback port, wait for health, check speculation."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{spec.name}.log"
    for _ in range(attempts):
        port = free_port()
        argv = spec.argv(binary, port)
        with log_path.open("ab") as log:
            log.write(f"$ {' '.join(argv)}\n".encode())
            log.flush()
            process = subprocess.Popen(  # noqa: S603 - argv built from a validated spec
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        server = RunningServer(spec, f"http://127.0.0.1:{port}", argv, log_path, process)
        try:
            if _wait_ready(server, time.monotonic() + READY_TIMEOUT_S):
                check_speculation(server)
                return server
        except BaseException:
            server.stop()
            raise
        # exited before ready: most likely the port was taken between probe and bind
    raise EngineError(
        f"{spec.name}: llama-server exited before ready {attempts} times; see {log_path}"
    )


@contextlib.contextmanager
def running(
    binary: Path, specs: Sequence[ServerSpec], *, log_dir: Path | None = None
) -> Iterator[dict[str, RunningServer]]:
    """Start every spec (by name); stop all of them on exit, whatever happens.

    Server logs go to ``log_dir/<name>.log`` (a temporary folder, removed at exit, if None).
    """
    if len({s.name for s in specs}) != len(specs):
        raise ValueError("server names must be unique")
    with contextlib.ExitStack() as stack:
        if log_dir is None:
            log_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llamacpp-")))
        servers: dict[str, RunningServer] = {}
        for spec in specs:
            server = start_server(binary, spec, log_dir=log_dir)
            stack.callback(server.stop)
            servers[spec.name] = server
        yield servers


@dataclass(frozen=True, slots=True)
class PairUrls:
    """Base URLs (``http://127.0.0.1:PORT``) of the started servers."""

    baseline: str
    spec_same: str
    spec_small: str
    servers: dict[str, RunningServer] = field(repr=False, compare=False)


@contextlib.contextmanager
def start_pair(
    paths: EnginePaths, *, log_dir: Path | None = None, draft_max: int = 8
) -> Iterator[PairUrls]:
    """Baseline (target alone), spec-same (exact-copy draft) and spec-small (small draft)."""
    target = paths.model("target")
    specs = [
        ServerSpec("baseline", target),
        ServerSpec("spec-same", target, draft=paths.model("draft-same"), draft_max=draft_max),
        ServerSpec("spec-small", target, draft=paths.model("draft-small"), draft_max=draft_max),
    ]
    with running(paths.server_bin, specs, log_dir=log_dir) as servers:
        yield PairUrls(
            servers["baseline"].url, servers["spec-same"].url, servers["spec-small"].url, servers
        )


@contextlib.contextmanager
def start_speedup_pair(
    paths: EnginePaths, *, log_dir: Path | None = None, draft_max: int = 8
) -> Iterator[dict[str, RunningServer]]:
    """``big-baseline`` and ``big-spec``: a pair where speculation really is faster on CPU.

    The big target's layers 1-7 cost full compute but change nothing, and the draft is its
    layer 0 alone, so every draft is accepted at a fraction of the target's cost (captured
    with the same construction: 1.65x the baseline's tokens/s).
    """
    target = paths.model("big-target")
    specs = [
        ServerSpec("big-baseline", target),
        ServerSpec("big-spec", target, draft=paths.model("big-draft"), draft_max=draft_max),
    ]
    with running(paths.server_bin, specs, log_dir=log_dir) as servers:
        yield servers


def wait_for_stop_signal() -> None:
    """Block until SIGINT or SIGTERM (the signals are blocked, then taken synchronously)."""
    stops = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        signal.sigwait(stops)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)


def describe(servers: dict[str, RunningServer], out: IO[str]) -> None:
    """One line per server: name, URL, speculation and pid."""
    for name, server in servers.items():
        draft = server.spec.draft.name if server.spec.draft else "none"
        out.write(f"{name:<11} {server.url}  draft={draft}  pid={server.process.pid}\n")
    out.flush()


def _echo(message: str) -> None:
    click.echo(message, err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Build and run llama.cpp's llama-server as a real speculative-decoding engine (CPU)."""


@cli.command()
@click.option("--jobs", "-j", default=2, show_default=True, help="parallel compile jobs")
def build(jobs: int) -> None:
    """Build llama-server into the engine cache (once per version and CPU) and make the models."""
    _echo(f"engine cache: {cache_root()} (set ${CACHE_ENV} to move it)")
    started = time.monotonic()
    paths = ensure_engine(jobs=jobs, progress=_echo)
    _echo(f"engine ready in {time.monotonic() - started:.1f} s")
    click.echo(f"server_bin {paths.server_bin}")
    click.echo(f"models_dir {paths.models_dir}")


@cli.command()
def models() -> None:
    """Generate the tiny target and draft models (deterministic, under 2 s)."""
    click.echo(ensure_models(progress=_echo))


@cli.command()
@click.option("--log-dir", type=click.Path(path_type=Path), default=None, help="server logs")
@click.option("--draft-max", default=8, show_default=True, help="tokens drafted per step")
@click.option("--speedup", is_flag=True, help="start the big pair where speculation is faster")
def serve(log_dir: Path | None, draft_max: int, speedup: bool) -> None:
    """Start baseline, spec-same and spec-small (or the --speedup pair) until Ctrl-C/SIGTERM."""
    paths = find_engine()
    if paths is None:
        raise click.ClickException("llama-server is not built; run the `build` command first")
    try:
        with contextlib.ExitStack() as stack:
            if speedup:
                servers = stack.enter_context(
                    start_speedup_pair(paths, log_dir=log_dir, draft_max=draft_max)
                )
            else:
                pair = stack.enter_context(start_pair(paths, log_dir=log_dir, draft_max=draft_max))
                servers = pair.servers
            describe(servers, sys.stdout)
            _echo("servers ready (speculation checked via /slots); Ctrl-C stops them")
            wait_for_stop_signal()
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    _echo("servers stopped")


if __name__ == "__main__":
    cli(prog_name="python -m tools.engine.llamacpp")
