"""``ReplayConfig``: every option of ``specproxy replay`` (command line or ``[replay]`` in TOML).

Validated on construction (a ValueError names the option; ``config.build`` turns it
into a ConfigError naming the file or the command line). Enumerated options are kept
as the strings the user typed and read back through typed properties.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specproxy.core.launch.command import parse_command
from specproxy.core.launch.config import parse_declarations
from specproxy.core.protocol.urls import check_server_url
from specproxy.core.records.model import Role, Route, SendMode
from specproxy.core.records.tally import DEFAULT_MAX_SEND_LAG_MS

ROUTES = {"chat": Route.CHAT, "completions": Route.COMPLETIONS, "generate": Route.GENERATE}
ARRIVALS = ("poisson", "constant")
OVER_CONTEXT = ("skip", "clamp")


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """Options of one replay run; see ``specproxy replay --help`` for each one's meaning."""

    traces: tuple[str, ...] = ()
    format: str | None = None
    skip_bad: bool = False
    concat: bool = False
    all_turns: bool = False
    baseline: str | None = None
    candidate: str | None = None
    via: str | None = None
    api_key: str | None = field(default=None, repr=False)
    mode: str | None = None
    side: str = "baseline"
    split: float = 0.5
    block_size: int = 16
    speed: float = 1.0
    rate: float | None = None
    arrival: str = "poisson"
    concurrency: int | None = None
    spread_buckets: bool = False
    max_idle_s: float | None = None
    skip: int = 0  # trace records passed over before ``limit`` (the sweep's --fresh-prompts)
    limit: int | None = None  # trace records read (before any filter)
    max_requests: int | None = None  # requests per side sent (after the filters, warm-up included)
    duration_s: float | None = None
    warmup: int = 0
    cooldown: int = 0  # alternate mode: each block's last N requests are sent, not counted
    seed: int = 0
    route: str = "generate"
    model: str | None = None
    output_len: int = 256
    output_len_from_reference: bool = False
    temperature: float = 0.0
    ignore_eos: bool = False
    min_tokens: bool = True
    max_context: int | None = None
    over_context: str = "skip"
    max_lag_ms: float = DEFAULT_MAX_SEND_LAG_MS
    drain_s: float = 30.0
    run_dir: str | None = None
    label: str | None = None
    snapshots: bool = True
    declare: tuple[str, ...] = ()
    baseline_launch: str | None = (
        None  # the full launch command, for a server that does not report it
    )
    candidate_launch: str | None = None
    launch_from_process: bool = False  # read it from the server's process (loopback only)
    score_requests: int = 0  # teacher-forced scoring requests after the run (replay.scoring)

    def __post_init__(self) -> None:
        object.__setattr__(self, "traces", tuple(self.traces))
        object.__setattr__(self, "declare", tuple(self.declare))
        parse_declarations(self.declare)
        for role in Role:
            command = self.launch_command(role)
            if command is not None:
                try:
                    parse_command(command)
                except ValueError as exc:
                    raise ValueError(f"{role}_launch: {exc}") from exc
        if not self.traces:
            raise ValueError("give at least one trace file")
        self._check_targets()
        self._check_numbers()
        if self.route not in ROUTES:
            raise ValueError(f"route must be one of {', '.join(ROUTES)}, got {self.route!r}")
        if self.arrival not in ARRIVALS:
            raise ValueError(f"arrival must be poisson or constant, got {self.arrival!r}")
        if self.over_context not in OVER_CONTEXT:
            raise ValueError(f"over_context must be skip or clamp, got {self.over_context!r}")

    def _check_targets(self) -> None:
        if self.mode is not None and self.mode not in {m.value for m in SendMode}:
            raise ValueError(f"mode must be mirror, split, alternate or passthrough: {self.mode!r}")
        if self.side not in {r.value for r in Role}:
            raise ValueError(f"side must be baseline or candidate, got {self.side!r}")
        for key in ("baseline", "candidate", "via"):
            check_server_url(key, getattr(self, key))
        if self.via is None and self.baseline is None and self.candidate is None:
            raise ValueError("give --baseline and/or --candidate, or --via a running proxy")
        if self.via is not None:
            if self.mode == SendMode.ALTERNATE.value:
                raise ValueError("alternate mode needs the servers themselves, not --via a proxy")
            return
        needs_both = self.send_mode in (SendMode.MIRROR, SendMode.SPLIT, SendMode.ALTERNATE)
        if needs_both and (self.baseline is None or self.candidate is None):
            raise ValueError(f"mode {self.send_mode.value} needs both --baseline and --candidate")
        if self.send_mode is SendMode.PASSTHROUGH and self.url_of(self.passthrough_side) is None:
            raise ValueError(f"passthrough to {self.side} needs --{self.side}")

    def _check_numbers(self) -> None:
        positive = {
            "speed": self.speed,
            "block_size": self.block_size,
            "output_len": self.output_len,
            "max_lag_ms": self.max_lag_ms,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        optional = {
            "rate": self.rate,
            "concurrency": self.concurrency,
            "limit": self.limit,
            "max_requests": self.max_requests,
            "duration_s": self.duration_s,
            "max_idle_s": self.max_idle_s,
            "max_context": self.max_context,
        }
        for name, opt in optional.items():
            if opt is not None and not opt > 0:
                raise ValueError(f"{name} must be > 0, got {opt}")
        if not 0.0 <= self.split <= 1.0:
            raise ValueError(f"split must be between 0 and 1, got {self.split}")
        if self.warmup < 0 or self.drain_s < 0 or self.temperature < 0 or self.skip < 0:
            raise ValueError("warmup, drain_s, temperature and skip must be >= 0")
        if self.score_requests < 0:
            raise ValueError(f"score_requests must be >= 0, got {self.score_requests}")
        if not 0 <= self.cooldown < self.block_size:
            raise ValueError("cooldown must be >= 0 and smaller than block_size")

    @property
    def send_mode(self) -> SendMode:
        """The mode: as given, else mirror with two servers, else passthrough."""
        if self.mode is not None:
            return SendMode(self.mode)
        if self.via is None and (self.baseline is None or self.candidate is None):
            return SendMode.PASSTHROUGH
        return SendMode.MIRROR

    @property
    def passthrough_side(self) -> Role:
        """The side passthrough sends to: ``side``, or the only server given."""
        if self.mode is None and self.via is None:
            if self.baseline is None:
                return Role.CANDIDATE
            if self.candidate is None:
                return Role.BASELINE
        return Role(self.side)

    @property
    def route_choice(self) -> Route:
        return ROUTES[self.route]

    def launch_command(self, role: Role) -> str | None:
        """The full launch command the operator gave for ``role`` (``--baseline-launch``...)."""
        return self.baseline_launch if role is Role.BASELINE else self.candidate_launch

    def url_of(self, role: Role) -> str | None:
        return self.baseline if role is Role.BASELINE else self.candidate

    @property
    def closed_loop(self) -> bool:
        """Closed loop: a concurrency without a rate and without a speed factor other than 1."""
        return self.concurrency is not None and self.rate is None and self.speed == 1.0
