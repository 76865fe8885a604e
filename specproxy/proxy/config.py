"""The proxy's configuration: one frozen value built from command-line options and TOML.

Owns every tunable of ``specproxy serve`` and its defaults; nothing else in the proxy
reads options. Strings from TOML or the command line (``mode = "mirror"``) are turned
into their enums here, and every check that can fail names the offending key.

Defaults and why:

- ``max_shadow_in_flight = 256``: shadow copies beyond this are dropped and recorded
  as ``shadow_dropped``; 256 is well above SGLang's usual ``max_running_requests``
  (48 for speculative servers), so drops mean a genuinely overloaded shadow.
- ``shadow_deadline_s = 300``: a shadow copy running longer is cut off and recorded
  as ``timeout``; it never affects the client either way.
- ``max_body_bytes = 8 MiB``: larger request bodies get 413.
- ``drain_s = 30``: on SIGTERM, in-flight requests get this long to finish.
- ``split = 0.5``: the share of split-mode requests sent to the candidate.
- ``rotate_mb`` / ``rotate_s`` unset: ``requests.jsonl`` is one file; set, it is rolled
  at that size (MB) or age (seconds), and a report reads the rolled set as one run.
- ``workers = 1``: one process. N > 1 starts N worker processes sharing the port
  (``proxy.workers``); with ``record`` each writes its own trace shard, which the parent
  merges into ``trace.jsonl`` at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specproxy.backends.base import BackendKind, Timeouts
from specproxy.core.launch.command import parse_command
from specproxy.core.launch.config import parse_declarations
from specproxy.core.protocol.urls import check_server_url
from specproxy.core.records.model import Role, SendMode

DEFAULT_PORT = 8000
DEFAULT_MAX_SHADOW_IN_FLIGHT = 256
DEFAULT_SHADOW_DEADLINE_S = 300.0
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_DRAIN_S = 30.0
_MODES = (SendMode.MIRROR, SendMode.SPLIT, SendMode.PASSTHROUGH)


def _enum(cls: Any, key: str, value: Any, allowed: tuple[Any, ...]) -> Any:
    try:
        member = cls(value)
    except ValueError:
        member = None
    if member not in allowed:
        names = "|".join(str(a) for a in allowed)
        raise ValueError(f"{key} must be one of {names}, got {value!r}")
    return member


def _optional_path(value: Any) -> Path | None:
    return None if value is None else Path(value)


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """Everything ``specproxy serve`` needs; see the module docstring for defaults."""

    baseline: str | None = None
    candidate: str | None = None
    mode: SendMode = SendMode.MIRROR
    primary: Role = Role.BASELINE
    split: float = 0.5
    seed: int | None = None
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    run_dir: Path | None = None
    label: str = "serve"
    kind: BackendKind = BackendKind.SGLANG
    api_key: str | None = field(default=None, repr=False)
    baseline_api_key: str | None = field(default=None, repr=False)
    candidate_api_key: str | None = field(default=None, repr=False)
    max_shadow_in_flight: int = DEFAULT_MAX_SHADOW_IN_FLIGHT
    shadow_deadline_s: float = DEFAULT_SHADOW_DEADLINE_S
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    record_text: bool = False
    record: bool = False  # write RUN_DIR/trace.jsonl (native format) of the live traffic
    declare: tuple[str, ...] = ()  # KEY=VALUE identity facts for both launch configs
    sticky_header: str | None = None
    sticky_user: bool = False
    connect_timeout_s: float = 5.0
    first_byte_timeout_s: float = 300.0
    idle_timeout_s: float = 120.0
    total_timeout_s: float = 1800.0
    health_timeout_s: float = 10.0
    drain_s: float = DEFAULT_DRAIN_S
    max_connections: int = 1024
    rotate_mb: float | None = None
    rotate_s: float | None = None
    workers: int = 1
    require_upstreams: bool = True  # `serve` checks both servers answer before listening
    baseline_launch: str | None = None  # full launch command of a server that does not report it
    candidate_launch: str | None = None
    launch_from_process: bool = False  # read it from the server's process (loopback only)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "mode", _enum(SendMode, "mode", self.mode, _MODES))
        set_(self, "primary", _enum(Role, "primary", self.primary, tuple(Role)))
        set_(self, "kind", _enum(BackendKind, "kind", self.kind, tuple(BackendKind)))
        set_(self, "run_dir", _optional_path(self.run_dir))
        set_(self, "declare", tuple(self.declare))
        parse_declarations(self.declare)
        for role in Role:
            check_server_url(str(role), self.url(role))
            if self.launch_command(role) is not None:
                try:
                    parse_command(str(self.launch_command(role)))
                except ValueError as exc:
                    raise ValueError(f"{role}_launch: {exc}") from exc
        self._check_sides()
        self._check_numbers()
        if self.sticky_header is not None and not self.sticky_header.strip():
            raise ValueError("sticky_header must not be empty")
        if self.sticky_header is not None and self.sticky_user:
            raise ValueError("choose one of sticky_header and sticky_user")

    def _check_sides(self) -> None:
        if self.mode is SendMode.PASSTHROUGH:
            if self.url(self.primary) is None:
                raise ValueError(f"mode passthrough needs the primary's URL ({self.primary})")
            return
        missing = [str(r) for r in Role if self.url(r) is None]
        if missing:
            raise ValueError(f"mode {self.mode} needs both URLs; missing: {', '.join(missing)}")

    def _check_numbers(self) -> None:
        if not 0.0 <= self.split <= 1.0:
            raise ValueError(f"split must be between 0 and 1, got {self.split}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535, got {self.port}")
        for name in ("max_shadow_in_flight", "max_body_bytes", "max_connections", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in (
            "shadow_deadline_s",
            "connect_timeout_s",
            "first_byte_timeout_s",
            "idle_timeout_s",
            "total_timeout_s",
            "health_timeout_s",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.drain_s < 0:
            raise ValueError(f"drain_s must be >= 0, got {self.drain_s}")
        for name in ("rotate_mb", "rotate_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")

    @property
    def rotate_bytes(self) -> int | None:
        """``rotate_mb`` in bytes (None: records are not rolled by size)."""
        return int(self.rotate_mb * 1_000_000) if self.rotate_mb is not None else None

    def url(self, role: Role) -> str | None:
        """The configured URL of ``role``'s server, or None."""
        return self.baseline if role is Role.BASELINE else self.candidate

    def launch_command(self, role: Role) -> str | None:
        """The full launch command the operator gave for ``role`` (``--baseline-launch``...)."""
        return self.baseline_launch if role is Role.BASELINE else self.candidate_launch

    @property
    def client_authorization(self) -> bytes | None:
        """The ``Authorization`` header a client must send (``--api-key``), or None: what
        the server compares a request's against (``proxy.intake``)."""
        return f"Bearer {self.api_key}".encode() if self.api_key else None

    def upstream_key(self, role: Role) -> str | None:
        """The API key the proxy itself sends to ``role``'s server, if configured."""
        return self.baseline_api_key if role is Role.BASELINE else self.candidate_api_key

    @property
    def sides(self) -> tuple[Role, ...]:
        """The roles with a configured server, baseline first."""
        return tuple(r for r in Role if self.url(r) is not None)

    def timeouts(self) -> Timeouts:
        """Upstream deadlines (the shadow deadline is enforced separately, per copy)."""
        return Timeouts(
            connect_s=self.connect_timeout_s,
            first_byte_s=min(self.first_byte_timeout_s, self.total_timeout_s),
            idle_s=self.idle_timeout_s,
            total_s=self.total_timeout_s,
        )
