"""Window acceptance: one server's own figure over a window, from two snapshots of it.

Pure. The one definition of window acceptance for every consumer (the report, the
engine tests): the same as per request (``core.measurement.acceptance``), **output tokens per target
verify step**, from counters read before and after the window:

- SGLang Prometheus counters: ``generation_tokens_total`` (summed over every label set,
  ``is_streaming`` and ``dp_rank`` included) over ``spec_verify_calls_total``. Exact.
- llama.cpp's ``llamacpp:`` counters (``llamacpp_window``): exact given the number of
  requests the server finished in the window, else a lower bound, flagged.
- SGLang server info ``internal_states[*].avg_spec_accept_length``: cumulative since start
  or the last cache flush (warm-up and earlier runs included), one value per DP rank;
  the fallback when there are no counters (``sglang_server_info_accept_length`` says how
  ranks are combined).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specproxy.core.measurement.acceptance import accept_length_of
from specproxy.core.protocol.prometheus import Exposition, counter_delta, parse_exposition
from specproxy.core.records.model import Role
from specproxy.errors import ProtocolError

SGLANG_GENERATED = "sglang:generation_tokens_total"
SGLANG_VERIFY = "sglang:spec_verify_calls_total"
LLAMACPP_PREDICTED = "llamacpp:tokens_predicted_total"
LLAMACPP_DECODES = "llamacpp:n_decode_total"
LLAMACPP_DRAFT_TOKENS = "llamacpp:spec_decode_num_draft_tokens_total"
LLAMACPP_ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
LLAMACPP_DRAFTS = "llamacpp:spec_decode_num_drafts_total"
LLAMACPP_PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _sum_histograms(hists: Sequence[tuple[int, ...] | None]) -> tuple[int, ...] | None:
    if not hists or any(h is None for h in hists):
        return None
    width = max(len(h) for h in hists if h is not None)
    return tuple(sum(h[i] for h in hists if h is not None and i < len(h)) for i in range(width))


@dataclass(frozen=True, slots=True)
class WindowAcceptance:
    """Acceptance of one server over a window, from counters read before and after it.

    ``accept_length`` follows the module definition (tokens per verify step). ``source``
    names the counters: ``sglang_prometheus``, ``sglang_server_info`` (cumulative since
    start, not windowed) or ``llamacpp_prometheus``. ``histogram`` (llama.cpp only):
    index k = verification steps that accepted exactly k drafts. ``lower_bound`` marks a
    figure whose denominator also counts prompt passes (see ``llamacpp_window``).
    """

    source: str
    accept_length: float | None
    generated_tokens: float | None = None
    verify_steps: float | None = None
    accepted_drafts: float | None = None
    proposed_drafts: float | None = None
    accept_rate: float | None = None
    histogram: tuple[int, ...] | None = None
    lower_bound: bool = False

    def __post_init__(self) -> None:
        if self.accept_length is not None and self.accept_length < 0:
            raise ValueError("accept_length must be >= 0")


def sglang_window(before: Exposition, after: Exposition) -> WindowAcceptance | None:
    """Σ generation tokens / Σ verify calls between two SGLang scrapes; None if not speculative."""
    verify = counter_delta(before, after, SGLANG_VERIFY)
    if verify is None:
        return None
    tokens = counter_delta(before, after, SGLANG_GENERATED)
    length = accept_length_of(tokens, verify)
    return WindowAcceptance(
        source="sglang_prometheus",
        accept_length=length,
        generated_tokens=tokens,
        verify_steps=verify,
    )


def sglang_server_info_ranks(server_info: Mapping[str, Any]) -> tuple[float, ...]:
    """``internal_states[*].avg_spec_accept_length``: one value per DP rank that reports it."""
    states = server_info.get("internal_states")
    if not isinstance(states, list):
        return ()
    return tuple(
        v
        for s in states
        if isinstance(s, Mapping) and (v := _num(s.get("avg_spec_accept_length"))) is not None
    )


def sglang_server_info_accept_length(server_info: Mapping[str, Any]) -> float | None:
    """The mean of ``sglang_server_info_ranks`` (cumulative since start); None if absent.

    Each DP rank keeps its own cumulative counters and reports its own average; the
    server-wide figure is their step-weighted mean, and the steps per rank are not
    reported, so the plain mean over ranks stands in for it (exact when the ranks did
    equal work; SGLang's own bench reads rank 0 only, which ignores the other ranks). The
    Prometheus counters, summed over ranks, are exact and are preferred wherever present.
    """
    values = sglang_server_info_ranks(server_info)
    return sum(values) / len(values) if values else None


def llamacpp_window(
    before: Exposition, after: Exposition, *, requests: int | None = None
) -> WindowAcceptance | None:
    """Window acceptance from llama.cpp counters; None when the server never drafted.

    ``n_decode_total`` counts target decode calls: one per (short) prompt plus one per
    step, and every step emits its accepted drafts plus one token. With the number of
    ``requests`` that finished in the window, verify steps are ``Δn_decode - requests``
    and the length equals the ratio of the per-request figures (SGLang's definition).
    Without it the prompt passes stay in the denominator: ``Δtokens / Δn_decode`` is a
    lower bound (flagged ``lower_bound``). Counting only steps that verified a draft
    (``Δdrafts``) would overstate a server that drafts rarely (n-gram), so it is not used.
    """
    drafts = counter_delta(before, after, LLAMACPP_DRAFTS)
    if not drafts:
        return None
    accepted = counter_delta(before, after, LLAMACPP_ACCEPTED)
    proposed = counter_delta(before, after, LLAMACPP_DRAFT_TOKENS)
    tokens = counter_delta(before, after, LLAMACPP_PREDICTED)
    decodes = counter_delta(before, after, LLAMACPP_DECODES)
    steps = decodes - requests if decodes is not None and requests is not None else decodes
    length = accept_length_of(tokens, steps)
    return WindowAcceptance(
        source="llamacpp_prometheus",
        accept_length=length if length is None or length >= 0 else None,
        generated_tokens=tokens,
        verify_steps=steps,
        accepted_drafts=accepted,
        proposed_drafts=proposed,
        accept_rate=accepted / proposed if accepted is not None and proposed else None,
        histogram=_llamacpp_histogram(before, after, drafts),
        lower_bound=requests is None,
    )


def _llamacpp_histogram(
    before: Exposition, after: Exposition, drafts: float
) -> tuple[int, ...] | None:
    """Steps by drafts accepted, from per-position counters (position p = accepted > p)."""
    labels = {s.label("position") for s in after.named(LLAMACPP_PER_POS)}
    if not labels or not all(v is not None and v.isdigit() for v in labels):
        return None
    positions = sorted(int(v) for v in labels if v is not None)
    if positions != list(range(len(positions))):
        return None
    at_least = [drafts]
    for pos in positions:
        delta = counter_delta(before, after, LLAMACPP_PER_POS, position=str(pos))
        at_least.append(delta or 0.0)
    at_least.append(0.0)
    return tuple(int(at_least[k] - at_least[k + 1]) for k in range(len(positions) + 1))


def _snapshot_avg(snapshot: Mapping[str, Any] | None) -> tuple[float | None, int]:
    info = (snapshot or {}).get("server_info")
    if not isinstance(info, Mapping):
        return None, 0
    return sglang_server_info_accept_length(info), len(sglang_server_info_ranks(info))


@dataclass(frozen=True, slots=True)
class ServerAcceptance:
    """One server's own acceptance figures around a window (before and after snapshots).

    ``window`` is the counter figure (``sglang_window`` or ``llamacpp_window``: the one
    definition of window acceptance, for every consumer); ``avg_before`` / ``avg_after``
    are SGLang's cumulative ``avg_spec_accept_length`` (``sglang_server_info_accept_length``,
    over ``dp_ranks`` ranks; since start or the last cache flush, warm-up included).
    ``problems`` says why a figure is missing.
    """

    side: Role
    window: WindowAcceptance | None
    avg_before: float | None
    avg_after: float | None
    problems: tuple[str, ...]
    dp_ranks: int = 0

    @property
    def window_accept_length(self) -> float | None:
        return self.window.accept_length if self.window is not None else None

    @property
    def generation_tokens(self) -> float | None:
        return self.window.generated_tokens if self.window is not None else None

    @property
    def verify_calls(self) -> float | None:
        return self.window.verify_steps if self.window is not None else None


def _counter_window(
    before: Mapping[str, Any], after: Mapping[str, Any], requests: int | None, problems: list[str]
) -> WindowAcceptance | None:
    texts = (before.get("metrics_text"), after.get("metrics_text"))
    if not all(isinstance(t, str) and t for t in texts):
        problems.append("snapshot has no metrics text (server started without --enable-metrics?)")
        return None
    try:
        expo_a, expo_b = parse_exposition(str(texts[0])), parse_exposition(str(texts[1]))
    except ProtocolError as exc:
        problems.append(f"unreadable metrics text: {exc}")
        return None
    found = sglang_window(expo_a, expo_b) or llamacpp_window(expo_a, expo_b, requests=requests)
    if found is None:
        if counter_delta(expo_a, expo_b, SGLANG_GENERATED) is not None:
            problems.append(f"metrics lack {SGLANG_VERIFY} (speculation off on this server?)")
        else:
            problems.append("metrics have no speculative counters (speculation off?)")
    elif found.accept_length is None:
        problems.append("no verify calls in the window (speculation off or idle)")
    return found


def server_acceptance(
    side: Role,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    *,
    requests: int | None = None,
) -> ServerAcceptance:
    """Window acceptance of one server from its before/after snapshot dicts (either may be
    None); ``requests`` it finished in the window makes a llama.cpp figure exact."""
    problems: list[str] = []
    window = None
    if before is None or after is None:
        problems.append(f"no {'before' if before is None else 'after'} snapshot")
    else:
        window = _counter_window(before, after, requests, problems)
    avg_before, _ = _snapshot_avg(before)
    avg_after, ranks = _snapshot_avg(after)
    return ServerAcceptance(side, window, avg_before, avg_after, tuple(problems), ranks)


def merge_windows(parts: Sequence[WindowAcceptance | None]) -> WindowAcceptance | None:
    """One window standing for several (runs, replicas): counters summed, figure recomputed.

    None unless every part has a figure from the same source.
    """
    if not parts or any(p is None for p in parts):
        return None
    windows = [p for p in parts if p is not None]
    if len({w.source for w in windows}) != 1:
        return None

    def total(values: Sequence[float | None]) -> float | None:
        return sum(v for v in values if v is not None) if None not in values else None

    tokens = total([w.generated_tokens for w in windows])
    steps = total([w.verify_steps for w in windows])
    accepted = total([w.accepted_drafts for w in windows])
    proposed = total([w.proposed_drafts for w in windows])
    return WindowAcceptance(
        source=windows[0].source,
        accept_length=accept_length_of(tokens, steps),
        generated_tokens=tokens,
        verify_steps=steps,
        accepted_drafts=accepted,
        proposed_drafts=proposed,
        accept_rate=accepted / proposed if accepted is not None and proposed else None,
        histogram=_sum_histograms([w.histogram for w in windows]),
        lower_bound=any(w.lower_bound for w in windows),
    )
