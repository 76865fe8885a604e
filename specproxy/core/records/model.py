"""Frozen value types shared by every layer: roles, routes, error kinds, measurements, records.

Owns the request record's schema (docs/contract.md, The request record). Pure: imports nothing from specproxy but
``errors`` and ``core.measurement.timing`` (the per-token latency definition), and nothing with
I/O. Units: every duration is an integer number of microseconds and its name ends in
``_us``; wall-clock instants are float seconds since the Unix epoch and end in
``_unix_s``. Offsets called ``*_send_us`` are on the run's
monotonic clock (microseconds since the run started); every other ``*_us`` is measured
from the moment the request was sent.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from specproxy.core.measurement.timing import token_latencies_us
from specproxy.errors import ProtocolError

RECORD_SCHEMA_VERSION = 3
"""3: the chunk arrays come last in the line, after their summary (``CHUNK_SUMMARY``: how
many chunks, their earliest and latest offset, their tokens), so that a reader that needs
only the summary can cut the arrays' bytes off the line before parsing it; 2: chunk
arrival times stored as ``chunk_gaps_us`` (the first chunk's offset from the send, then
each chunk's gap from the one before: shorter numbers, the same evidence); 1 stored the
absolute ``chunk_offsets_us``. Readers accept all three."""

CHUNK_SUMMARY = ("chunk_count", "chunk_min_us", "chunk_max_us", "chunk_tokens_sum")
"""The summary of a record's chunk arrays (schema 3): the number of chunks, the earliest
and latest chunk offset (None without chunks) and the sum of ``chunk_tokens``."""
CHUNK_ARRAYS = ("chunk_gaps_us", "chunk_tokens", "chunk_choices")
"""The chunk arrays, the last keys of a schema-3 line, in this order."""


class Role(StrEnum):
    """Which server of the pair: the non-speculative baseline or the speculative candidate."""

    BASELINE = "baseline"
    CANDIDATE = "candidate"

    @property
    def other(self) -> Role:
        return Role.CANDIDATE if self is Role.BASELINE else Role.BASELINE


class Route(StrEnum):
    """The generation endpoints specproxy measures."""

    CHAT = "/v1/chat/completions"
    COMPLETIONS = "/v1/completions"
    GENERATE = "/generate"


class SendMode(StrEnum):
    """How requests are distributed over the two sides (docs/contract.md, Sending modes)."""

    MIRROR = "mirror"
    SPLIT = "split"
    ALTERNATE = "alternate"
    PASSTHROUGH = "passthrough"


class ErrorKind(StrEnum):
    """Why a request did not complete normally (docs/contract.md, Error classes)."""

    CONNECT = "connect"
    TIMEOUT = "timeout"
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    STREAM_TRUNCATED = "stream_truncated"
    STREAM_ERROR = "stream_error"  # an in-stream `data: {"error": ...}` event
    ABORTED = "aborted"  # the server finished the request with finish_reason "abort"
    PROTOCOL = "protocol"  # bytes that are not the protocol (bad SSE/JSON)
    CLIENT_CANCELLED = "client_cancelled"
    SHADOW_DROPPED = "shadow_dropped"

    @classmethod
    def for_status(cls, status: int) -> ErrorKind:
        return cls.HTTP_4XX if status < 500 else cls.HTTP_5XX


class AcceptanceSource(StrEnum):
    """Where a request's acceptance figure came from; only CHUNK_ESTIMATE is an estimate."""

    META_INFO = "meta_info"  # SGLang /generate meta_info, or chat `return_meta_info`
    SGLEXT = "sglext"  # SGLang >= 0.5.19 `sglext.spec_tokens_details`
    LLAMACPP_TIMINGS = "llamacpp_timings"  # llama.cpp `timings.draft_n` / `draft_n_accepted`
    CHUNK_ESTIMATE = "chunk_estimate"  # tokens per stream chunk (no server figure)


@dataclass(frozen=True, slots=True)
class Acceptance:
    """Speculative acceptance of one request.

    ``accept_length`` is tokens emitted per target verify step, bonus token included
    (SGLang's ``spec_accept_length``: completion_tokens / spec_verify_ct). A
    non-speculative server has accept_length 1.0 by this definition.
    ``accept_length_from`` says how it was obtained: ``spec_accept_length`` (read as the
    server reported it), ``completion_tokens/spec_verify_ct`` (computed from SGLang
    counts when the length itself was missing), ``predicted_n/verify_ct`` (llama.cpp,
    always computed) or ``completion_tokens/(chunks-choices)`` (the chunk estimate); None
    when there is no length.
    """

    source: AcceptanceSource
    accept_length: float | None = None
    verify_ct: int | None = None
    correct_drafts: int | None = None
    proposed_drafts: int | None = None
    accept_rate: float | None = None
    histogram: tuple[int, ...] | None = None
    accept_length_from: str | None = None

    def __post_init__(self) -> None:
        if self.accept_length is not None and self.accept_length < 0:
            raise ValueError("accept_length must be >= 0")
        if self.verify_ct is not None and self.verify_ct < 0:
            raise ValueError("verify_ct must be >= 0")

    @property
    def estimated(self) -> bool:
        return self.source is AcceptanceSource.CHUNK_ESTIMATE

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in _ACCEPTANCE_NAMES}  # all flat values
        out["source"] = self.source.value
        out["estimated"] = self.estimated
        if self.histogram is not None:
            out["histogram"] = list(self.histogram)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Acceptance:
        hist = data.get("histogram")
        return cls(
            source=_member(AcceptanceSource, data["source"]),
            accept_length=data.get("accept_length"),
            verify_ct=data.get("verify_ct"),
            correct_drafts=data.get("correct_drafts"),
            proposed_drafts=data.get("proposed_drafts"),
            accept_rate=data.get("accept_rate"),
            histogram=tuple(hist) if hist is not None else None,
            accept_length_from=_interned(data.get("accept_length_from")),
        )


@dataclass(frozen=True, slots=True)
class Measurement:
    """What one response told us, folded from its bytes by ``core.measurement.measure``.

    All ``*_us`` are microseconds since the request was sent. ``chunk_offsets_us``
    holds the arrival of each stream event that carried output tokens, and
    ``chunk_tokens`` the tokens in it: exact when the server reported per-event counts,
    else estimated from its total (``core.measurement.timing.estimate_chunk_tokens``) and flagged by
    ``chunk_tokens_estimated``. ``chunk_choices`` holds each event's choice index when a
    stream had several choices (n > 1); it is empty for one choice.

    ``itl_us`` is the one definition of per-token latency (ITL) that every consumer
    uses; ``itl_estimated`` says whether it rests on estimated token counts.
    """

    status: int | None = None
    error_kind: ErrorKind | None = None
    error_message: str | None = None
    headers_us: int | None = None
    ttft_us: int | None = None
    e2e_us: int | None = None
    tpot_us: int | None = None
    chunk_offsets_us: tuple[int, ...] = ()
    chunk_tokens: tuple[int, ...] = ()
    chunk_tokens_estimated: bool = False
    chunk_choices: tuple[int, ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    output_sha256: str | None = None
    output_text: str | None = None
    acceptance: Acceptance | None = None
    server_e2e_us: int | None = None

    def __post_init__(self) -> None:
        if len(self.chunk_offsets_us) != len(self.chunk_tokens):
            raise ValueError("chunk_offsets_us and chunk_tokens must have the same length")
        if self.chunk_choices and len(self.chunk_choices) != len(self.chunk_tokens):
            raise ValueError("chunk_choices and chunk_tokens must have the same length")
        for name in ("headers_us", "ttft_us", "e2e_us", "tpot_us"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def itl_us(self) -> list[tuple[int, int]]:
        """Per-token latency: ``(latency_us, tokens)`` per output event after the first of
        its choice (``core.measurement.timing.token_latencies_us``); record as ``record(v, tokens)``."""
        return token_latencies_us(self.chunk_offsets_us, self.chunk_tokens, self.chunk_choices)

    @property
    def itl_estimated(self) -> bool:
        """True when ``itl_us`` rests on estimated tokens per event (and there is an ITL)."""
        return self.chunk_tokens_estimated and bool(self.itl_us)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """The raw measurement of one request on one backend (docs/contract.md, The request record); one per request sent.

    Serialised flat (identity fields and measurement fields side by side) as one JSON
    line of ``requests.jsonl``.
    """

    experiment_id: str
    request_id: str
    side: Role
    route: Route
    stream: bool
    backend_url: str
    sent_at_unix_s: float
    actual_send_us: int
    measurement: Measurement
    pair_id: str | None = None
    mode: SendMode | None = None
    shadow: bool = False
    warmup: bool = False
    intended_send_us: int | None = None
    in_flight_at_send: int = 0
    fingerprint: str | None = None
    category: str | None = None
    trace_index: int | None = None
    synthetic_prompt: bool = False
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ValueError("request_id must not be empty")
        if self.in_flight_at_send < 0:
            raise ValueError("in_flight_at_send must be >= 0")

    @property
    def send_lag_us(self) -> int | None:
        if self.intended_send_us is None:
            return None
        return self.actual_send_us - self.intended_send_us

    @property
    def ok(self) -> bool:
        return self.measurement.error_kind is None  # Measurement.ok, one call fewer (hot)

    def to_dict(self) -> dict[str, Any]:
        m = self.measurement
        out: dict[str, Any] = {"schema": RECORD_SCHEMA_VERSION}
        for name in _RECORD_NAMES:
            out[name] = getattr(self, name)
        out["side"] = self.side.value
        out["route"] = self.route.value
        out["mode"] = self.mode.value if self.mode is not None else None
        out["labels"] = dict(self.labels)
        out["send_lag_us"] = self.send_lag_us
        for name in _MEASUREMENT_NAMES:
            out[name] = getattr(m, name)
        out["error_kind"] = m.error_kind.value if m.error_kind is not None else None
        out["acceptance"] = m.acceptance.to_dict() if m.acceptance is not None else None
        for name in ("chunk_offsets_us", "chunk_tokens", "chunk_choices"):  # last (schema 3)
            del out[name]
        offsets = m.chunk_offsets_us
        out.update(zip(CHUNK_SUMMARY, chunk_summary(offsets, m.chunk_tokens), strict=True))
        out["chunk_gaps_us"] = chunk_gaps(offsets)
        out["chunk_tokens"] = list(m.chunk_tokens)
        out["chunk_choices"] = list(m.chunk_choices)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        try:
            m_args = {k: v for k, v in data.items() if k in _MEASUREMENT_FIELDS}
            m_args["chunk_offsets_us"] = chunk_offsets(data)
            m_args["chunk_tokens"] = tuple(m_args.get("chunk_tokens") or ())
            check_chunk_summary(data, m_args["chunk_offsets_us"], m_args["chunk_tokens"])
            m_args["chunk_choices"] = tuple(m_args.get("chunk_choices") or ())
            if m_args.get("error_kind") is not None:
                m_args["error_kind"] = _member(ErrorKind, m_args["error_kind"])
            if m_args.get("acceptance") is not None:
                m_args["acceptance"] = Acceptance.from_dict(m_args["acceptance"])
            r_args = {k: v for k, v in data.items() if k in _RECORD_FIELDS}
            r_args["side"] = _member(Role, r_args["side"])
            r_args["route"] = _member(Route, r_args["route"])
            if r_args.get("mode") is not None:
                r_args["mode"] = _member(SendMode, r_args["mode"])
            r_args["labels"] = dict(r_args.get("labels") or {})
            for name in _SHARED_FIELDS:  # few distinct values: one copy each in a long run
                if name in r_args:
                    r_args[name] = _interned(r_args[name])
            m_args["finish_reason"] = _interned(m_args.get("finish_reason"))
            return cls(measurement=Measurement(**m_args), **r_args)
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"not a request record: {exc}") from exc


_MEASUREMENT_NAMES = tuple(f.name for f in dataclasses.fields(Measurement))  # in order
_MEASUREMENT_FIELDS = frozenset(_MEASUREMENT_NAMES)
_ACCEPTANCE_NAMES = tuple(f.name for f in dataclasses.fields(Acceptance))
_SHARED_FIELDS = ("experiment_id", "backend_url", "fingerprint", "category")
_MEMBERS: dict[type[StrEnum], dict[str, StrEnum]] = {
    kind: {m.value: m for m in kind}
    for kind in (Role, Route, SendMode, ErrorKind, AcceptanceSource)
}


_E = TypeVar("_E", bound=StrEnum)


def _member(kind: type[_E], value: Any) -> _E:
    """``kind(value)`` by table look-up (hot when reading records); ValueError as ``kind``."""
    member = _MEMBERS[kind].get(value) if type(value) is str else None
    return member if member is not None else kind(value)  # type: ignore[return-value]


_RECORD_NAMES = tuple(f.name for f in dataclasses.fields(RequestRecord) if f.name != "measurement")
_RECORD_FIELDS = frozenset(_RECORD_NAMES)


def _interned(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


def chunk_gaps(offsets_us: tuple[int, ...]) -> list[int]:
    """Delta encoding of chunk offsets: the first offset, then each one minus the one before."""
    return [b - a for a, b in zip((0, *offsets_us), offsets_us, strict=False)]


def chunk_offsets(data: dict[str, Any]) -> tuple[int, ...]:
    """A record dict's chunk offsets (us since send): ``chunk_gaps_us`` summed up (schema 2)
    or the absolute ``chunk_offsets_us`` (schema 1); ValueError on a non-integer entry."""
    gaps = data.get("chunk_gaps_us")
    if gaps is None:
        return tuple(data.get("chunk_offsets_us") or ())
    if not isinstance(gaps, list) or type(sum(gaps)) is not int:  # a float or str fails here
        raise ValueError("chunk_gaps_us must be a list of integers")
    return tuple(itertools.accumulate(gaps))


def chunk_summary(
    offsets_us: tuple[int, ...] | list[int], tokens: tuple[int, ...] | list[int]
) -> tuple[int, int | None, int | None, int]:
    """The values of ``CHUNK_SUMMARY`` for chunks at ``offsets_us`` carrying ``tokens``."""
    if not offsets_us:
        return 0, None, None, sum(tokens)
    return len(offsets_us), min(offsets_us), max(offsets_us), sum(tokens)


def check_chunk_summary(
    data: dict[str, Any], offsets_us: tuple[int, ...] | list[int], tokens: tuple[int, ...]
) -> None:
    """ValueError when ``data`` carries a chunk summary (schema 3) that its chunk arrays,
    read as ``offsets_us`` and ``tokens``, do not give; nothing without a summary."""
    if "chunk_count" not in data:
        return
    stored = tuple(data.get(name) for name in CHUNK_SUMMARY)
    if stored != chunk_summary(offsets_us, tokens):
        raise ValueError(f"the chunk summary {stored} disagrees with the chunk arrays")
