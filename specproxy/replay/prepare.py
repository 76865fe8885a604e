"""Everything decided before the first request goes out: the ``Prepared`` workload.

Reads the traces, reaches the servers (model name, context length; BackendUnreachable
when one cannot be reached), calibrates prompt synthesis when some records are
length-only, applies the request limits, the context limit (``--max-context`` also skips
text prompts that do not fit) and the schedule, and plans
the sending windows of the mode. Also decides the request options (once the servers'
launch configurations are known) and describes the workload for experiment.json.

Two guards: a workload with nothing to send is a ``ConfigError`` (exit status 2) naming
the trace files and why (no lines, every line skipped as bad, every request over the
context or past ``--duration``); and prompt synthesis is always bounded by a context
length: ``--max-context``, else the server's ``max_model_len``, else
``DEFAULT_MAX_CONTEXT`` tokens (a server that reports none must not make a trace line
asking for 1e9 tokens build a prompt that size). The first request over it is named by
``file:line`` in the summary (``over_context_first``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from specproxy.backends.base import BackendSpec
from specproxy.backends.http import HttpBackend, open_backend
from specproxy.core.launch.config import LaunchConfig
from specproxy.core.protocol.versions import supports_spec_details
from specproxy.core.records.model import Role, SendMode
from specproxy.errors import BackendError, ConfigError
from specproxy.replay import servers, workload
from specproxy.replay.config import ReplayConfig
from specproxy.replay.formats import REFERENCE_KEYS
from specproxy.replay.modes import Window, plan_windows
from specproxy.replay.readers import parse_format, read_traces
from specproxy.replay.requests import RequestOptions
from specproxy.replay.synth import Vocabulary
from specproxy.replay.tokenizer import ServerFacts, ServerTokenCounter, TokenizerUnavailable
from specproxy.replay.trace import TraceRecord, TraceSet

DEFAULT_CONNECTIONS = 1024
DEFAULT_MAX_CONTEXT = 131_072  # tokens, when neither --max-context nor the server gives one


@dataclass(frozen=True, slots=True)
class Prepared:
    """The workload after every filter: records in send order, offsets, windows, facts."""

    traces: TraceSet
    records: list[TraceRecord]
    offsets_us: list[int] | None
    windows: list[Window]
    vocabulary: Vocabulary | None
    max_context: int | None
    skipped_context: int
    clamped_context: int
    model: str | None
    output_tokens: dict[int, int]
    over_context_first: str | None = None  # file:line of the first request over max_context

    @property
    def synthetic(self) -> int:
        return sum(1 for r in self.records if r.synthetic_prompt)


def make_backends(cfg: ReplayConfig) -> dict[Role, HttpBackend]:
    """The backends requests go to: the proxy alone with ``via``, else the mode's sides.

    With ``via`` the proxy is filed under ``--side`` (default baseline, the proxy's
    default primary): the label a record gets when the proxy's response does not say
    which side answered. Each backend may open as many connections as the closed-loop
    concurrency (at least ``DEFAULT_CONNECTIONS``), so the limit is the schedule's, not
    the connection pool's.
    """
    connections = max(DEFAULT_CONNECTIONS, cfg.concurrency or 0)
    if cfg.via is not None:
        spec = BackendSpec(
            cfg.via, Role(cfg.side), api_key=cfg.api_key, max_connections=connections
        )
        return {Role(cfg.side): HttpBackend(spec)}
    out: dict[Role, HttpBackend] = {}
    for role in Role:
        url = cfg.url_of(role)
        wanted = cfg.send_mode is not SendMode.PASSTHROUGH or role is cfg.passthrough_side
        if url is not None and wanted:
            spec = BackendSpec(url, role, api_key=cfg.api_key, max_connections=connections)
            out[role] = HttpBackend(spec)
    return out


def request_options(
    cfg: ReplayConfig, model: str | None, configs: Mapping[Role, LaunchConfig | None]
) -> RequestOptions:
    """How requests are built. Per-request spec stats are asked for on the OpenAI routes
    when every server reports a version that accepts ``return_spec_tokens_details``
    (0.5.19+), and never through a proxy (``via``)."""
    spec_details = (
        cfg.via is None
        and bool(configs)
        and all(c is not None and supports_spec_details(c.version) for c in configs.values())
    )
    return RequestOptions(
        spec_details=spec_details,
        route=cfg.route_choice,
        model=model,
        default_output_tokens=cfg.output_len,
        temperature=cfg.temperature,
        ignore_eos=cfg.ignore_eos,
        min_tokens=cfg.min_tokens,
    )


@contextlib.asynccontextmanager
async def _tokenizer_backend(
    cfg: ReplayConfig, backends: Mapping[Role, HttpBackend]
) -> AsyncIterator[HttpBackend]:
    """The server whose ``/tokenize`` counts tokens: the first backend, or with ``via``
    (the proxy does not forward ``/tokenize``) a server given directly, when there is one."""
    direct = cfg.baseline or cfg.candidate
    if cfg.via is None or direct is None:
        yield next(iter(backends.values()))
        return
    async with open_backend(BackendSpec(direct, Role(cfg.side), api_key=cfg.api_key)) as backend:
        yield backend


async def prepare(cfg: ReplayConfig, backends: Mapping[Role, HttpBackend]) -> Prepared:
    """Build the ``Prepared`` workload (see the module docstring)."""
    fmt = parse_format(cfg.format) if cfg.format else None
    traces = read_traces(
        cfg.traces, fmt, skip_bad=cfg.skip_bad, concat=cfg.concat, all_turns=cfg.all_turns
    )
    rest = traces.records[cfg.skip :]
    records = list(rest[: cfg.limit] if cfg.limit else rest)
    if not records:
        why = f"no request after the first {cfg.skip}" if cfg.skip else "no request could be read"
        raise _nothing_to_send(traces, why)
    facts = await servers.check_reachable(backends)
    async with _tokenizer_backend(cfg, backends) as tokenizing:
        return await _prepare_records(cfg, traces, records, facts, tokenizing)


async def _prepare_records(
    cfg: ReplayConfig,
    traces: TraceSet,
    records: list[TraceRecord],
    facts: ServerFacts,
    tokenizing: HttpBackend,
) -> Prepared:
    model = cfg.model or facts.model
    counter = ServerTokenCounter(tokenizing, model=model)
    needs_vocab = any(r.synthetic_prompt for r in records)
    vocab = await servers.vocabulary(counter) if needs_vocab else None
    max_context = (
        cfg.max_context or facts.max_model_len or counter.max_model_len or DEFAULT_MAX_CONTEXT
    )
    ctx = workload.apply_context(records, max_context, cfg.over_context)
    if not ctx.records:
        why = f"all {len(records)} requests need more than the context of {max_context} tokens"
        raise _nothing_to_send(traces, why)
    fitting, text_skipped = await _text_within_context(cfg, ctx.records, counter)
    if not fitting:
        why = f"all {len(ctx.records)} text prompts need more than --max-context {cfg.max_context}"
        raise _nothing_to_send(traces, why)
    kept, offsets = workload.within_duration(fitting, _offsets(cfg, fitting), cfg.duration_s)
    if not kept:
        raise _nothing_to_send(traces, f"no request arrives within --duration {cfg.duration_s:g} s")
    if cfg.max_requests is not None:
        kept = kept[: cfg.max_requests]
        offsets = offsets[: cfg.max_requests] if offsets is not None else None
    if cfg.output_len_from_reference and kept and not any(r.reference_answer for r in kept):
        raise ConfigError(
            f"--output-len-from-reference: none of the {len(kept)} requests has a reference"
            " answer (read from a ShareGPT assistant turn or a prompt line's "
            + ", ".join(repr(k) for k in REFERENCE_KEYS)
            + "); leave the option out (--output-len sets the length instead)"
        )
    outputs = await servers.reference_lengths(kept, counter, vocab, cfg.output_len_from_reference)
    return Prepared(
        traces,
        kept,
        offsets,
        _windows(cfg, len(kept), offsets),
        vocab,
        max_context,
        ctx.skipped + text_skipped,
        ctx.clamped,
        model,
        outputs,
        _first_over(records, max_context),
    )


def _first_over(records: list[TraceRecord], max_context: int) -> str | None:
    """``file:line`` of the first synthesised request that needs more than ``max_context``."""
    for r in records:
        if r.synthetic_prompt and (r.input_tokens or 0) + (r.output_tokens or 0) > max_context:
            return r.source
    return None


def _nothing_to_send(traces: TraceSet, why: str) -> ConfigError:
    """The error for a workload that sends nothing: the files, what was read, and ``why``."""
    parts = []
    for f in traces.files:
        skipped = f" ({f.skipped_bad} bad lines skipped)" if f.skipped_bad else ""
        parts.append(f"{f.path}: {f.records} requests{skipped}")
    return ConfigError(f"nothing to send: {why}; " + "; ".join(parts))


def prompt_text(record: TraceRecord) -> str | None:
    """The text a record's prompt carries (messages, or a body's messages/prompt/text)."""
    if record.messages:
        return "\n".join(content for _, content in record.messages)
    body = record.body or {}
    messages = body.get("messages")
    if isinstance(messages, list):
        parts = [m.get("content") for m in messages if isinstance(m, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    found = body.get("prompt", body.get("text"))
    return found if isinstance(found, str) else None


async def _text_within_context(
    cfg: ReplayConfig, records: list[TraceRecord], counter: ServerTokenCounter
) -> tuple[list[TraceRecord], int]:
    """With ``--max-context`` given, text prompts whose tokens plus output exceed it are
    skipped (text cannot be clamped); counted with the server's ``/tokenize`` (chat
    template tokens not included), else about 4 tokens per 3 words."""
    limit = cfg.max_context
    texts = [(i, t) for i, r in enumerate(records) if (t := prompt_text(r)) is not None]
    if limit is None or not texts:
        return records, 0
    try:
        counts = await counter.count([t for _, t in texts])
    except (TokenizerUnavailable, BackendError):
        counts = [round(len(t.split()) * 4 / 3) for _, t in texts]
    over = {
        i
        for (i, _), n in zip(texts, counts, strict=True)
        if n + (records[i].output_tokens or cfg.output_len) > limit
    }
    return [r for i, r in enumerate(records) if i not in over], len(over)


def _offsets(cfg: ReplayConfig, records: list[TraceRecord]) -> list[int] | None:
    return workload.arrival_offsets(
        records,
        rate=cfg.rate,
        arrival=cfg.arrival,
        seed=cfg.seed,
        closed_loop=cfg.closed_loop,
        speed=cfg.speed,
        spread=cfg.spread_buckets,
        max_idle_s=cfg.max_idle_s,
    )


def _windows(cfg: ReplayConfig, count: int, offsets: list[int] | None) -> list[Window]:
    """The mode's windows (``via``: one passthrough window to the proxy)."""
    return plan_windows(
        cfg.send_mode if cfg.via is None else SendMode.PASSTHROUGH,
        count,
        offsets,
        warmup=cfg.warmup,
        side=cfg.passthrough_side if cfg.via is None else Role(cfg.side),
        share_candidate=cfg.split,
        seed=cfg.seed,
        block_size=cfg.block_size,
        cooldown=cfg.cooldown,
    )


def _schedule_info(cfg: ReplayConfig, prep: Prepared) -> dict[str, Any]:
    if prep.offsets_us is None:
        kind = "closed_loop"
    elif cfg.rate is not None:
        kind = cfg.arrival
    else:
        kind = "recorded"
    return {
        "kind": kind,
        "speed": cfg.speed,
        "rate": cfg.rate,
        "arrival": cfg.arrival,
        "concurrency": cfg.concurrency,
        "seed": cfg.seed,
        "spread_buckets": cfg.spread_buckets,
        "max_idle_s": cfg.max_idle_s,
        "duration_s": cfg.duration_s,
        "span_s": prep.offsets_us[-1] / 1e6 if prep.offsets_us else None,
    }


def workload_info(cfg: ReplayConfig, prep: Prepared) -> dict[str, Any]:
    """experiment.json's ``workload``: traces, schedule, mode, synthesis and every count."""
    return {
        "tool": "specproxy replay",
        "traces": [f.to_dict() for f in prep.traces.files],
        "records_read": len(prep.traces.records),
        "skipped_bad": prep.traces.skipped_bad,
        "requests_planned": len(prep.records),
        "skip": cfg.skip,
        "limit": cfg.limit,
        "max_requests": cfg.max_requests,
        "warmup": cfg.warmup,
        "cooldown": cfg.cooldown,
        "mode": cfg.send_mode.value,
        "via": cfg.via,
        "block_size": cfg.block_size,
        "split_candidate_share": cfg.split,
        "schedule": _schedule_info(cfg, prep),
        "synthetic_prompts": prep.synthetic,
        "prompt_synthesis": prep.vocabulary.to_dict() if prep.vocabulary else None,
        "max_context": prep.max_context,
        "over_context": {
            "policy": cfg.over_context,
            "skipped": prep.skipped_context,
            "clamped": prep.clamped_context,
        },
        "all_turns": cfg.all_turns,
        "output_len_from_reference": (
            {"requests": len(prep.output_tokens), "of": len(prep.records)}
            if cfg.output_len_from_reference
            else None
        ),
        "max_lag_ms": cfg.max_lag_ms,
    }
