"""What one running proxy holds between requests, read by its server and its routes.

A mutable holder by necessity: its parts are created by the lifecycle contexts in
``proxy.lifecycle`` (in order: upstreams, recording, relay) and torn down by them in
reverse; handlers only read it. Nothing here is per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specproxy.backends.base import Backend
from specproxy.core.launch.config import LaunchConfig
from specproxy.core.load.sides import SidePolicy
from specproxy.core.protocol.shaping import Injection
from specproxy.core.records.model import Role
from specproxy.core.records.runfiles import shard_name
from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.metrics import ProxyMetrics
from specproxy.proxy.relay import Relay, ShadowSupervisor
from specproxy.proxy.sampling import SamplingTally
from specproxy.proxy.trace_recording import TraceRecorder
from specproxy.recording.experiment import ExperimentWriter
from specproxy.recording.recorder import Recorder
from specproxy.runtime import MonotonicClock


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """Who one worker of ``serve --workers N`` (N > 1) is, as its parent started it.

    The parent owns the run directory, the experiment id and ``experiment.json``; the
    worker writes only its shard's files (``core.records.runfiles``) and its metrics into
    ``metrics_dir`` (prometheus_client's multiprocess files).
    """

    index: int
    count: int
    run_dir: Path
    experiment_id: str
    metrics_dir: Path
    origin_ns: int | None = None  # the parent's clock origin (``runtime.MonotonicClock``)

    @property
    def shard(self) -> str:
        return shard_name(self.index)


@dataclass(slots=True)
class ProxyState:
    """The proxy's long-lived parts; see the module docstring for who creates each."""

    config: ProxyConfig
    experiment_id: str
    run_dir: Path
    clock: MonotonicClock = field(default_factory=MonotonicClock)
    metrics: ProxyMetrics = field(default_factory=ProxyMetrics)
    policy: SidePolicy | None = None
    backends: dict[Role, Backend] = field(default_factory=dict)
    launch: dict[Role, LaunchConfig | None] = field(default_factory=dict)
    injection: dict[Role, Injection] = field(default_factory=dict)
    recorder: Recorder | None = None
    experiment: ExperimentWriter | None = None
    shadows: ShadowSupervisor | None = None
    relay: Relay | None = None
    shutdown_started_us: int | None = None
    sampling: SamplingTally = field(default_factory=SamplingTally)
    trace: TraceRecorder | None = None
    worker: WorkerSpec | None = None  # set in a worker of ``serve --workers N``, N > 1

    @property
    def run_level(self) -> bool:
        """Whether this process writes the run's own files (``experiment.json``, snapshots):
        a proxy of one process does; a worker leaves them to its parent."""
        return self.worker is None

    def fingerprint(self, role: Role) -> str | None:
        config = self.launch.get(role)
        return None if config is None else config.fingerprint

    def version(self, role: Role) -> str | None:
        config = self.launch.get(role)
        return None if config is None else config.version
