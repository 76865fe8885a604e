"""``serve --workers N`` (N > 1): N proxy processes on one port, and the parent running them.

Why processes: one proxy process is one Python thread, and on a many-core host it
saturates long before the servers do. Each worker is a whole proxy (``proxy.server``)
in its own spawned process; all of them bind the port with ``SO_REUSEPORT`` and the
kernel spreads new connections over them. The parent first binds the port itself with
``SO_REUSEPORT`` (without listening, so it is never given a connection) to learn it
when ``--port 0`` and to hold it until every worker listens, then closes it.

Who writes what, in the one run directory:

- the parent: the run's own files, once: the "before" snapshots and ``experiment.json``
  (``running``, with both launch configurations) before any worker starts; after the
  last worker has exited, the "after" snapshots and ``experiment.json`` ``completed``,
  whose summary is computed from every worker's records (``recording.figures_from_records``,
  so it covers all of them; this reads the records once more at exit, as the report
  that ``serve`` writes then does: about 34 µs a record on a 2-core machine, which a
  long run must add to its supervisor's grace period); with ``--record``, also
  ``trace.jsonl``, merged from the workers' trace shards in arrival order;
- worker ``K``: its own records, histogram logs, run log and, with ``--record``, trace
  shard (``core.records.runfiles``: names with ``wK``; ``specproxy report`` reads all of them as
  one run), all on the parent's clock (``WorkerSpec.origin_ns``), and its metrics in
  prometheus_client's multiprocess files in a temporary directory (removed at exit), so
  ``/_specproxy/metrics`` and ``/_specproxy/status`` on any worker count every worker.

Stopping: SIGTERM or SIGINT to the parent is passed on as SIGTERM to every worker; each
drains its in-flight requests as a single proxy does, and the parent exits after the
last one. A worker that exits while the run is serving (or fails to start, or exits
non-zero) is logged (``worker_died``), the others are stopped the same way, the run is
marked ``aborted`` with the reason, and ``serve`` exits non-zero: no worker is lost
silently. The parent gives the workers ``drain_s`` + ``STOP_GRACE_S`` to exit after
asking, then kills the rest (also reported).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType
from typing import Any

from specproxy.core.records.runfiles import (
    SHARD_RECORDS_GLOB,
    SHARD_TRACE_GLOB,
    order_record_files,
    trace_name,
)
from specproxy.errors import ConfigError, SpecproxyError
from specproxy.log import get_logger
from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.lifecycle import begin_run, end_run, learn_launch, open_backends, run_summary
from specproxy.proxy.server import run_proxy
from specproxy.proxy.state import ProxyState, WorkerSpec
from specproxy.proxy.trace_recording import merge_trace_shards
from specproxy.recording.recorder import figures_from_records
from specproxy.recording.rundir import new_experiment_id, new_run_dir
from specproxy.runtime import run

START_TIMEOUT_S = 60.0  # from starting a worker to it listening
STOP_GRACE_S = 30.0  # beyond drain_s, before a worker that does not exit is killed
_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass(frozen=True, slots=True)
class WorkersRun:
    """How a ``--workers`` run ended: its directory and, if a worker failed, why."""

    run_dir: Path
    failure: str | None = None


def _worker_main(config: ProxyConfig, spec: WorkerSpec, conn: Connection) -> None:
    """A worker process: one proxy in ``spec``'s shard; tells the parent when it listens
    (``ready``) and, at the end, its sampling counts (``stopped``)."""

    def ready(url: str, _run_dir: Path) -> None:
        conn.send(("ready", url))

    def stopped(state: ProxyState) -> None:
        conn.send(("stopped", state.sampling.counts()))

    try:
        run(run_proxy(config, worker=spec, on_ready=ready, on_stopped=stopped))
    except SpecproxyError as exc:
        get_logger().error("worker_failed", worker=spec.index, reason=str(exc))
        conn.send(("failed", str(exc)))
        raise SystemExit(exc.exit_code) from None


@dataclass(slots=True)
class _Worker:
    spec: WorkerSpec
    process: BaseProcess
    conn: Connection
    url: str | None = None
    sampling: dict[str, int] | None = None
    failed: str | None = None
    exitcode: int | None = None

    def receive(self) -> None:
        """Read every message the worker has sent so far."""
        with contextlib.suppress(EOFError, OSError):
            while self.conn.poll():
                kind, value = self.conn.recv()
                if kind == "ready":
                    self.url = value
                elif kind == "stopped":
                    self.sampling = value
                elif kind == "failed":
                    self.failed = value


@dataclass(slots=True)
class _Supervisor:
    """The parent's view of its workers: who is alive, and whether the run must stop."""

    workers: list[_Worker]
    log: Any
    stop_requested: bool = False
    failures: list[str] = field(default_factory=list)

    def alive(self) -> list[_Worker]:
        return [w for w in self.workers if w.exitcode is None]

    def stop(self) -> None:
        """Ask every live worker to drain and exit (SIGTERM)."""
        self.stop_requested = True
        for w in self.alive():
            if w.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(w.process.pid, signal.SIGTERM)

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.log.info("workers_stopping", signal=signal.Signals(signum).name)
        self.stop()

    def poll(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for a message or an exit; record what happened."""
        alive = self.alive()
        waitables: list[Any] = [w.process.sentinel for w in alive] + [w.conn for w in alive]
        if waitables:
            wait(waitables, timeout=timeout_s)
        for w in alive:
            w.receive()
            if w.process.is_alive():
                continue
            w.process.join()
            w.receive()
            w.exitcode = w.process.exitcode if w.process.exitcode is not None else -1
            self._judge(w)

    def _judge(self, w: _Worker) -> None:
        if w.exitcode == 0 and self.stop_requested:
            return
        why = f"worker {w.spec.index} (pid {w.process.pid}) exited with code {w.exitcode}"
        if not self.stop_requested:
            why += " while serving"
        if w.failed:
            why += f": {w.failed}"
        self.log.error("worker_died", worker=w.spec.index, pid=w.process.pid, exitcode=w.exitcode)
        self.failures.append(why)
        if not self.stop_requested:
            self.stop()

    def kill_the_rest(self) -> None:
        for w in self.alive():
            self.log.error("worker_killed", worker=w.spec.index, pid=w.process.pid)
            w.process.kill()
            w.process.join()
            w.exitcode = w.process.exitcode
            self.failures.append(
                f"worker {w.spec.index} (pid {w.process.pid}) did not exit after the drain; killed"
            )


def _reserve_port(host: str, port: int) -> socket.socket:
    """A bound, not listening ``SO_REUSEPORT`` socket on ``host:port`` (0: any free port)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    """``os.environ[name] = value`` while the workers are spawned (they inherit it)."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


async def _begin(state: ProxyState) -> None:
    async with open_backends(state):
        await learn_launch(state)
        await begin_run(state)


async def _end(state: ProxyState, summary: dict[str, Any] | None, error: str | None) -> None:
    async with open_backends(state):
        await end_run(state, summary, error)


def _start(config: ProxyConfig, specs: list[WorkerSpec]) -> list[_Worker]:
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited loop
    workers: list[_Worker] = []
    with _env(_MULTIPROC_ENV, str(specs[0].metrics_dir)):
        for spec in specs:
            parent_end, child_end = context.Pipe(duplex=False)
            process = context.Process(
                target=_worker_main,
                args=(config, spec, child_end),
                name=f"specproxy-worker-{spec.index}",
            )
            process.start()
            child_end.close()
            workers.append(_Worker(spec, process, parent_end))
    return workers


def _serve(config: ProxyConfig, sup: _Supervisor, on_ready: Callable[[str], None]) -> None:
    """Wait for every worker to listen, then until they have all exited."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not sup.stop_requested and any(w.url is None for w in sup.workers):
        if time.monotonic() > deadline:
            sup.failures.append(f"not every worker listened within {START_TIMEOUT_S:g} s")
            sup.stop()
            break
        sup.poll(0.5)
    if not sup.stop_requested:
        url = sup.workers[0].url
        assert url is not None
        on_ready(url)
    while sup.alive() and not sup.stop_requested:
        sup.poll(1.0)
    deadline = time.monotonic() + config.drain_s + STOP_GRACE_S
    while sup.alive() and time.monotonic() < deadline:
        sup.poll(0.5)
    sup.kill_the_rest()


def _merge_traces(run_dir: Path, sup: _Supervisor, log: Any) -> None:
    """``--record``: the workers' trace shards into ``trace.jsonl`` (a failure is the run's)."""
    shards = sorted(run_dir.glob(SHARD_TRACE_GLOB))
    try:
        written = merge_trace_shards(run_dir, shards)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a damaged shard
        sup.failures.append(f"the trace shards could not be merged ({exc})")
        return
    log.info("trace_recorded", path=str(run_dir / trace_name()), written=written)


def _finish(state: ProxyState, sup: _Supervisor, log: Any) -> WorkersRun:
    """After the workers stopped: their sampling counts, the merged trace, the run's
    summary from every shard of records, and the run's end."""
    run_dir = state.run_dir
    for w in sup.workers:
        if w.sampling is not None:
            state.sampling.add_counts(w.sampling)
        w.conn.close()
    if state.config.record:
        _merge_traces(run_dir, sup, log)
    files = order_record_files(p.name for p in run_dir.glob(SHARD_RECORDS_GLOB))
    summary: dict[str, Any] | None = None
    try:
        summary = run_summary(figures_from_records([run_dir / name for name in files]))
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a damaged shard
        sup.failures.append(f"the records could not be summed up ({exc})")
    failure = "; ".join(sup.failures) or None
    run(_end(state, summary, failure))
    log.info("workers_stopped", run_dir=str(run_dir), failure=failure)
    return WorkersRun(run_dir, failure)


def run_workers(
    config: ProxyConfig, *, on_ready: Callable[[str, Path], None] | None = None
) -> WorkersRun:
    """Serve with ``config.workers`` processes until SIGTERM/SIGINT (see the module docstring)."""
    experiment_id = new_experiment_id()
    run_dir = new_run_dir(config.run_dir, config.label, experiment_id=experiment_id)
    state = ProxyState(config=config, experiment_id=experiment_id, run_dir=run_dir)
    log = get_logger(experiment_id=experiment_id)
    run(_begin(state))
    try:
        reserved = _reserve_port(config.host, config.port)
    except OSError as exc:
        why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        reason = f"cannot listen on {config.host}:{config.port}: {why}"
        run(_end(state, None, reason))
        raise ConfigError(f"{reason} (run directory {run_dir} marked aborted)") from exc
    metrics_dir = Path(tempfile.mkdtemp(prefix="specproxy-metrics-"))
    try:
        with reserved:
            port = reserved.getsockname()[1]
            worker_config = replace(config, port=port)
            origin_ns = state.clock.origin_ns
            specs = [
                WorkerSpec(i, config.workers, run_dir, experiment_id, metrics_dir, origin_ns)
                for i in range(config.workers)
            ]
            sup = _Supervisor(_start(worker_config, specs), log)
            previous = {
                sig: signal.signal(sig, sup.on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
            }
            log.info("workers_started", pids=[w.process.pid for w in sup.workers], port=port)

            def ready(url: str) -> None:
                reserved.close()  # every worker listens: the reservation's job is done
                if on_ready is not None:
                    on_ready(url, run_dir)

            try:
                _serve(worker_config, sup, ready)
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        return _finish(state, sup, log)
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
