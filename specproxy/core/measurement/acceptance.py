"""Speculative acceptance: per request (from what the response reports) and per window.

Pure. One definition throughout, SGLang's: **accept length = output tokens per target
verify step, bonus token included**, i.e. ``completion_tokens / spec_verify_ct``. The
first output token comes from prefill, so it is in the numerator but not a verify step
(the same slight over-count SGLang has). Every verify step emits its accepted drafts
plus one token of the target's own, so ``verify_ct = completion_tokens -
accepted_drafts - 1``; the SGLang captures satisfy this exactly (64 tokens, 19
correct drafts, 44 verifies).

Per request, in order of preference (``pick``):

1. ``meta_info`` (SGLang ``/generate``, or chat with ``return_meta_info``), current and
   legacy field names (``spec_accepted_drafts`` / ``spec_proposed_drafts`` /
   ``spec_accept_histogram`` were removed in 0.5.21). When ``spec_verify_ct`` is there
   but ``spec_accept_length`` is not, the length is computed as ``completion_tokens /
   spec_verify_ct`` (SGLang's own formula) and ``accept_length_from`` says so.
2. ``sglext.spec_tokens_details`` (SGLang >= 0.5.19; a list when n > 1).
3. llama.cpp ``timings``: ``draft_n`` (drafted) and ``draft_n_accepted``, absent when no
   draft ran. llama.cpp reports no verify count, so it is derived with the relation
   above: ``verify_ct = predicted_n - draft_n_accepted - 1`` and ``accept_length =
   predicted_n / verify_ct`` — directly comparable with SGLang's figure.
4. Only for a stream with nothing reported: tokens per output chunk. Every verify step
   releases one chunk and the first chunk is the prefill token, so the estimate is
   ``completion_tokens / (chunks - 1)``; it equals ``spec_accept_length`` exactly in every
   SGLang ``/generate`` capture (e.g. 64 / 44). The server may merge steps into one
   chunk under back-pressure (and chat skips steps with no visible text), so it can only
   over-estimate; it is flagged ``CHUNK_ESTIMATE``. With exact tokens per chunk (one
   choice) the same bursts give an estimated step histogram (``burst_histogram``).

Per window (two snapshots of one server), with the same definition: see
``core.measurement.acceptance_window``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from specproxy.core.records.model import Acceptance, AcceptanceSource

# Where a per-request accept length came from (``Acceptance.accept_length_from``).
REPORTED = "spec_accept_length"
TOKENS_PER_VERIFY = "completion_tokens/spec_verify_ct"
LLAMACPP_STEPS = "predicted_n/verify_ct"
CHUNKS = "completion_tokens/(chunks-choices)"


def accept_length_of(tokens: float | None, verify_steps: float | None) -> float | None:
    """The accept length: output tokens per target verify step, bonus token included.

    The one definition behind every per-request, window and aggregate figure (SGLang's
    ``completion_tokens / spec_verify_ct``). None without a token count or a verify step.
    """
    if tokens is None or verify_steps is None or verify_steps <= 0:
        return None
    return tokens / verify_steps


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _hist(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, list) and all(_count(v) is not None for v in value):
        return tuple(value)
    return None


def from_meta_info(meta: Mapping[str, Any]) -> Acceptance | None:
    """Acceptance from SGLang ``meta_info`` (or ``spec_tokens_details``); None if no spec keys."""
    verify = _count(meta.get("spec_verify_ct"))
    length = _num(meta.get("spec_accept_length"))
    if verify is None and length is None:
        return None
    correct = _count(meta.get("spec_num_correct_drafts"))
    if correct is None:
        correct = _count(meta.get("spec_accepted_drafts"))
    proposed = _count(meta.get("spec_num_proposed_drafts"))
    if proposed is None:
        proposed = _count(meta.get("spec_proposed_drafts"))
    histogram = _hist(meta.get("spec_correct_drafts_histogram"))
    if histogram is None:
        histogram = _hist(meta.get("spec_accept_histogram"))
    rate = _num(meta.get("spec_accept_rate"))
    if rate is None and correct is not None and proposed:
        rate = correct / proposed
    length, origin = _meta_length(length, verify, _count(meta.get("completion_tokens")))
    return Acceptance(
        source=AcceptanceSource.META_INFO,
        accept_length=length,
        verify_ct=verify,
        correct_drafts=correct,
        proposed_drafts=proposed,
        accept_rate=rate,
        histogram=histogram,
        accept_length_from=origin,
    )


def _meta_length(
    reported: float | None, verify: int | None, completion: int | None
) -> tuple[float | None, str | None]:
    """(accept length, where it came from): the reported one, else completion / verify."""
    if reported is not None:
        return reported, REPORTED
    length = accept_length_of(completion, verify)
    if length is not None:
        return length, TOKENS_PER_VERIFY
    return None, None


def from_meta_infos(metas: Sequence[Mapping[str, Any]]) -> Acceptance | None:
    """One Acceptance for several choices / batch items (sums; length weighted by verifies)."""
    parts = [a for a in (from_meta_info(m) for m in metas) if a is not None]
    return combine_choices(parts)


def from_sglext(sglext: Mapping[str, Any]) -> Acceptance | None:
    """Acceptance from ``sglext.spec_tokens_details`` (an object, or a list when n > 1)."""
    details = sglext.get("spec_tokens_details")
    if isinstance(details, Mapping):
        details = [details]
    if not isinstance(details, list):
        return None
    parts = [from_meta_info(d) for d in details if isinstance(d, Mapping)]
    found = combine_choices([p for p in parts if p is not None])
    return replace(found, source=AcceptanceSource.SGLEXT) if found is not None else None


def from_llamacpp_timings(timings: Mapping[str, Any]) -> Acceptance | None:
    """Acceptance from llama.cpp ``timings``; None when no draft ran (keys absent)."""
    drafted = _count(timings.get("draft_n"))
    accepted = _count(timings.get("draft_n_accepted"))
    predicted = _count(timings.get("predicted_n"))
    if drafted is None or accepted is None:
        return None
    verify = predicted - accepted - 1 if predicted is not None else None
    length = accept_length_of(predicted, verify)
    return Acceptance(
        source=AcceptanceSource.LLAMACPP_TIMINGS,
        accept_length=length,
        verify_ct=verify if verify is not None and verify >= 0 else None,
        correct_drafts=accepted,
        proposed_drafts=drafted,
        accept_rate=accepted / drafted if drafted else None,
        accept_length_from=LLAMACPP_STEPS if length is not None else None,
    )


def burst_histogram(chunk_tokens: Sequence[int]) -> tuple[int, ...] | None:
    """Accepted drafts per verify step estimated from one choice's exact tokens per stream
    chunk, as SGLang's ``spec_correct_drafts_histogram``: index k counts the steps that
    kept k drafts. At ``stream_interval`` 1 every chunk after the first (the prefill
    token) is one verify step, which emits its kept drafts plus one token of the target's.

    The last chunk is left out: where the output stops (``max_new_tokens``, a stop token)
    the step's burst is cut, while the server counts every draft it verified in that step
    (the 0.5.16 captures: 24 steps and 42 drafts for 64 tokens). Steps merged into one chunk
    (back-pressure, ``stream_interval`` > 1) read as one longer step. None with fewer than
    three chunks or a chunk without tokens.
    """
    steps = chunk_tokens[1:-1]
    if not steps or min(steps) < 1:
        return None
    hist = [0] * max(steps)
    for n in steps:
        hist[n - 1] += 1
    return tuple(hist)


def estimate_from_chunks(
    completion_tokens: int,
    output_chunks: int,
    choices: int = 1,
    chunk_tokens: Sequence[int] | None = None,
) -> Acceptance | None:
    """Tokens per verify step estimated from a stream: tokens / (chunks - choices).

    The first chunk of each choice is its prefill token, not a verify step. None when no
    chunk is left for a verify step or there are fewer tokens than chunks. With exact
    ``chunk_tokens`` and one choice the estimate carries their ``burst_histogram``.
    """
    verify = output_chunks - max(choices, 1)
    if verify < 1 or completion_tokens < output_chunks:
        return None
    return Acceptance(
        source=AcceptanceSource.CHUNK_ESTIMATE,
        accept_length=accept_length_of(completion_tokens, verify),
        verify_ct=verify,
        histogram=burst_histogram(chunk_tokens) if chunk_tokens and choices <= 1 else None,
        accept_length_from=CHUNKS,
    )


def combine_choices(parts: Sequence[Acceptance]) -> Acceptance | None:
    """Fold per-choice acceptances: counts summed, accept length = Σ tokens / Σ verifies."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    verifies = [p.verify_ct for p in parts]
    lengths = [p.accept_length for p in parts]
    length: float | None = None
    verify_total: int | None = None
    if all(v is not None for v in verifies) and all(x is not None for x in lengths):
        verify_total = sum(v for v in verifies if v is not None)
        tokens = sum((x or 0.0) * (v or 0) for x, v in zip(lengths, verifies, strict=True))
        length = accept_length_of(tokens, verify_total)
    correct = _sum_opt([p.correct_drafts for p in parts])
    proposed = _sum_opt([p.proposed_drafts for p in parts])
    return Acceptance(
        source=parts[0].source,
        accept_length=length,
        verify_ct=verify_total,
        correct_drafts=correct,
        proposed_drafts=proposed,
        accept_rate=correct / proposed if correct is not None and proposed else None,
        histogram=_sum_histograms([p.histogram for p in parts]),
        accept_length_from=_combined_origin(parts) if length is not None else None,
    )


def _combined_origin(parts: Sequence[Acceptance]) -> str | None:
    """The parts' common origin; a mix of reported and computed lengths is a computed one."""
    origins = {p.accept_length_from for p in parts}
    return origins.pop() if len(origins) == 1 else TOKENS_PER_VERIFY


def _sum_opt(values: Sequence[int | None]) -> int | None:
    return sum(v for v in values if v is not None) if all(v is not None for v in values) else None


def _sum_histograms(hists: Sequence[tuple[int, ...] | None]) -> tuple[int, ...] | None:
    if any(h is None for h in hists):
        return None
    width = max(len(h) for h in hists if h is not None)
    return tuple(sum(h[i] for h in hists if h is not None and i < len(h)) for i in range(width))


def pick(*candidates: Acceptance | None) -> Acceptance | None:
    """The first candidate that is present (callers pass them in order of preference)."""
    for candidate in candidates:
        if candidate is not None:
            return candidate
    return None


def of_response(
    metas: Sequence[Mapping[str, Any]],
    sglext: Mapping[str, Any] | None,
    timings: Mapping[str, Any] | None,
    completion: int | None,
    exact: tuple[int, ...] | None,
    *,
    stream_chunks: int | None,
    choices: int,
    per_token_events: bool,
) -> Acceptance | None:
    """One response's acceptance, in the order of preference (module docstring): the best
    source it reported; else, for a stream (``stream_chunks``: its output events; None for
    a whole body) with a completion count, the estimate from its ``choices``' chunks (with
    ``exact`` tokens per chunk, a histogram too). None for llama.cpp, which sends one event
    per token (``timings``, or ``per_token_events``): its chunks say nothing about steps."""
    reported = pick(
        from_meta_infos(metas),
        from_sglext(sglext) if sglext is not None else None,
        from_llamacpp_timings(timings) if timings is not None else None,
    )
    if reported is not None or stream_chunks is None or completion is None:
        return reported
    if timings is not None or per_token_events:
        return None
    return estimate_from_chunks(completion, stream_chunks, choices, exact)
