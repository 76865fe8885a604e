"""``SweepConfig``: every option of ``specproxy sweep`` (command line or ``[sweep]`` in TOML).

Validated on construction (a ValueError names the option; ``config.build`` turns it into
a ConfigError naming the file or the command line). Ladders and ``--vary`` values may be
given as comma-separated strings (the command line) or lists (TOML).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specproxy.core.launch.command import parse_command
from specproxy.core.launch.config import parse_declarations
from specproxy.core.load.capacity import KEY_FORM, Bound, parse_bound
from specproxy.core.protocol.urls import check_server_url

SLO_KEYS = ("ttft_ms", "tpot_ms")
LEVEL_BLOCKS = 4
"""A concurrency level ``n`` sends blocks of at least ``LEVEL_BLOCKS * n`` requests, so that a
block keeps ``n`` requests in flight for most of its length (the last ``n`` drain)."""


@dataclass(frozen=True, slots=True)
class Slo:
    """A latency objective. ``ttft_ms``/``tpot_ms``: goodput (a request is *good* when it
    meets every such bound given). ``bounds``: per-request bounds at a percentile, for the
    capacity (``core.load.capacity``: ``ttft_p99_ms=500,tpot_p99_ms=40,e2e_p95_ms=2000``)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    bounds: tuple[Bound, ...] = ()

    def __post_init__(self) -> None:
        for name in SLO_KEYS:
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"slo {name} must be > 0, got {value}")

    @classmethod
    def parse(cls, text: Any) -> Slo | None:
        """``"ttft_ms=500,tpot_p99_ms=40"`` (or a TOML table of those keys) -> Slo; None for
        None or an empty string; ValueError naming the bad key."""
        if isinstance(text, dict):
            text = ",".join(f"{k}={v}" for k, v in text.items())
        if not text or not str(text).strip():
            return None
        values: dict[str, float] = {}
        bounds: dict[str, Bound] = {}
        for part in str(text).split(","):
            key, sep, raw = part.partition("=")
            key = key.strip().replace("-", "_")
            if not sep:
                raise ValueError(f"slo {key}: expected {key}=VALUE, got {part.strip()!r}")
            bound = parse_bound(key, raw.strip())
            if bound is not None:
                if bound.key in bounds:
                    raise ValueError(f"slo {key}: given twice")
                bounds[bound.key] = bound
                continue
            if key not in SLO_KEYS:
                raise ValueError(
                    f"slo: unknown key {key!r} in {part.strip()!r}: expected ttft_ms=X,"
                    f" tpot_ms=Y (goodput) or {KEY_FORM}"
                )
            try:
                values[key] = float(raw)
            except ValueError:
                raise ValueError(f"slo {key}: not a number: {raw!r}") from None
        return cls(**values, bounds=tuple(bounds.values()))

    def text(self) -> str:
        goodput = [f"{k}={getattr(self, k):g}" for k in SLO_KEYS if getattr(self, k)]
        return ",".join([*goodput, *(f"{b.key}={b.limit_ms:g}" for b in self.bounds)])


def split_list(value: Any, name: str) -> tuple[str, ...]:
    """A comma-separated string or a list -> stripped, non-empty strings."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    out = tuple(item.strip() for item in items if item.strip())
    if isinstance(value, str) and value.strip() and not out:
        raise ValueError(f"{name}: no value in {value!r}")
    return out


def _numbers(value: Any, name: str, kind: type) -> tuple[Any, ...]:
    out = []
    for item in split_list(value, name):
        try:
            number = kind(item)
        except ValueError:
            raise ValueError(f"{name}: not a {kind.__name__}: {item!r}") from None
        if not number > 0 or (isinstance(number, float) and not math.isfinite(number)):
            raise ValueError(f"{name}: every level must be > 0, got {item}")
        out.append(number)
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: a level appears twice")
    return tuple(sorted(out))


def parse_vary(items: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``["KEY=V1,V2", ...]`` -> ``((KEY, (V1, V2)), ...)``; ValueError naming a bad item."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().lstrip("-").replace("_", "-")
        values = split_list(raw, f"--vary {key}") if sep else ()
        if not key or not values:
            raise ValueError(f"vary: expected KEY=V1,V2,..., got {item!r}")
        if len(set(values)) != len(values):
            raise ValueError(f"vary {key}: a value appears twice")
        if any(key == k for k, _ in out):
            raise ValueError(f"vary {key}: given twice")
        out.append((key, values))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class SweepConfig:
    """Options of one sweep; see ``specproxy sweep --help`` for each one's meaning."""

    traces: tuple[str, ...] = ()
    baseline: str | None = None
    candidate: str | None = None
    concurrency: Any = None  # "1,2,4" or [1, 2, 4] -> tuple[int, ...]
    rate: Any = None  # "0.5,1,2" or a list -> tuple[float, ...]
    pairs: int = 200
    block_size: int = 16
    warmup: int = 0
    run_dir: str | None = None
    slo: Any = None  # "ttft_ms=X,tpot_p99_ms=Y" or a TOML table of those keys
    launch: str | None = None
    vary: tuple[str, ...] = ()
    format: str | None = None
    route: str = "generate"
    model: str | None = None
    output_len: int = 256
    ignore_eos: bool = False
    temperature: float = 0.0
    arrival: str = "poisson"
    seed: int = 0
    fresh_prompts: bool = False  # each batch continues the trace; no request is sent twice
    max_context: int | None = None
    skip_bad: bool = False
    snapshots: bool = True
    declare: tuple[str, ...] = ()
    baseline_launch: str | None = None  # full launch command of a server started by hand
    candidate_launch: str | None = None
    launch_from_process: bool = False
    drain_s: float = 30.0
    api_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "traces", tuple(self.traces))
        object.__setattr__(self, "vary", tuple(self.vary))
        object.__setattr__(self, "declare", tuple(self.declare))
        object.__setattr__(self, "concurrency", _numbers(self.concurrency, "concurrency", int))
        object.__setattr__(self, "rate", _numbers(self.rate, "rate", float))
        parse_declarations(self.declare)
        if not self.traces:
            raise ValueError("give at least one trace file")
        if bool(self.concurrency) == bool(self.rate):
            raise ValueError("give exactly one ladder: --concurrency 1,2,4,... or --rate R1,R2,...")
        self._check_targets()
        for name in ("pairs", "block_size", "output_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.pairs < 2:
            raise ValueError("pairs must be >= 2")
        if self.warmup < 0 or self.temperature < 0 or self.drain_s < 0:
            raise ValueError("warmup, temperature and drain_s must be >= 0")
        Slo.parse(self.slo)

    def _check_targets(self) -> None:
        check_server_url("baseline", self.baseline)
        check_server_url("candidate", self.candidate)
        vary = parse_vary(self.vary)
        if self.launch is None:
            if vary:
                raise ValueError(
                    "--vary needs --launch DESCRIPTION.toml (it relaunches the candidate)"
                )
            if self.baseline is None or self.candidate is None:
                raise ValueError(
                    "give --baseline URL and --candidate URL (or --launch with --vary)"
                )
        elif not vary:
            raise ValueError("--launch is for a setting sweep: give --vary KEY=V1,V2,...")
        elif self.baseline is not None or self.candidate is not None:
            raise ValueError("--launch starts both servers: leave out --baseline/--candidate")
        if self.launch is not None and (self.baseline_launch or self.candidate_launch):
            raise ValueError("--launch records both commands itself: leave out --*-launch")
        for name in ("baseline_launch", "candidate_launch"):
            if getattr(self, name) is not None:
                try:
                    parse_command(getattr(self, name))
                except ValueError as exc:
                    raise ValueError(f"{name}: {exc}") from exc

    @property
    def kind(self) -> str:
        """``"concurrency"`` or ``"rate"``: what the ladder's levels are."""
        return "concurrency" if self.concurrency else "rate"

    @property
    def levels(self) -> tuple[float, ...]:
        return tuple(float(v) for v in (self.concurrency or self.rate))

    @property
    def slo_bounds(self) -> Slo | None:
        return Slo.parse(self.slo)

    @property
    def settings(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        return parse_vary(self.vary)
