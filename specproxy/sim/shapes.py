"""JSON shapes of SGLang 0.5.16's generation responses, built from one engine ``SimJob``.

Key sets and key order follow the real captures: ``/generate`` bodies and stream
events (cumulative ``text``/``output_ids``; ``meta_info`` with ``e2e_latency`` and
every ``spec_*`` field on the final event only, the metrics-only timestamps only with
``--enable-metrics``); OpenAI completions chunks (``usage: null`` on every chunk
without ``include_usage``, ``finish_reason`` on the last text chunk, a usage chunk
with ``choices: []`` and no ``prompt_tokens_details``); chat chunks (role chunk,
content chunks, a separate finish chunk, no ``usage`` key, usage chunk with
``choices: []``). SGLang 0.5.19+'s ``sglext.spec_tokens_details`` and 0.5.21's
removal of the legacy ``spec_accepted_drafts``/``spec_proposed_drafts``/
``spec_accept_histogram`` names are decided by the caller through ``ShapeContext``.
With ``deterministic`` every time-derived field is frozen (timestamps to
``FIXED_CREATED``, durations to 0.0) so equal requests give equal bytes. Pure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from specproxy.sim.engine import SimJob
from specproxy.sim.text import EOS_ID, detokenize

FIXED_CREATED = 1_700_000_000


@dataclass(frozen=True, slots=True)
class ShapeContext:
    """Per-response facts the shapes need besides the job."""

    response_id: str
    model: str
    enable_metrics: bool
    legacy_spec_names: bool
    spec_details: bool
    deterministic: bool

    def now(self) -> float:
        return float(FIXED_CREATED) if self.deterministic else time.time()

    def created(self) -> int:
        return FIXED_CREATED if self.deterministic else int(time.time())


def _seconds(ctx: ShapeContext, start_ns: int | None, end_ns: int | None) -> float:
    if ctx.deterministic or start_ns is None or end_ns is None:
        return 0.0
    return max(0, end_ns - start_ns) / 1e9


def finish_reason(job: SimJob) -> dict[str, Any] | None:
    """``meta_info.finish_reason`` of /generate (None while running)."""
    if job.finish_type is None:
        return None
    if job.finish_type == "stop":
        return {"type": "stop", "matched": EOS_ID}
    if job.finish_type == "length":
        return {"type": "length", "length": job.produced}
    return {"type": "abort", "message": job.abort_message, "status_code": None, "err_type": None}


def matched_stop(job: SimJob) -> int | None:
    return EOS_ID if job.finish_type == "stop" else None


def meta_info(
    job: SimJob,
    ctx: ShapeContext,
    *,
    completion_tokens: int,
    final: bool,
    first: bool,
    streaming: bool,
) -> dict[str, Any]:
    """``meta_info`` of one /generate body or stream event after ``completion_tokens`` tokens."""
    meta: dict[str, Any] = {
        "id": ctx.response_id,
        "finish_reason": finish_reason(job) if final else None,
        "prompt_tokens": job.prompt_tokens,
        "weight_version": "default",
        "num_retractions": 0,
    }
    if ctx.enable_metrics:
        meta["queue_time"] = _seconds(ctx, job.arrival_ns, job.prefill_start_ns)
    meta.update(
        reasoning_tokens=0,
        completion_tokens=completion_tokens,
        cached_tokens=job.cached_tokens,
        cached_tokens_details={"device": job.cached_tokens, "host": 0}
        if job.cached_tokens
        else None,
        dp_rank=None,
    )
    if final:
        meta["e2e_latency"] = _seconds(ctx, job.arrival_ns, job.finish_ns)
        if job.spec is not None:
            meta.update(job.spec.meta_fields(job.produced, legacy_names=ctx.legacy_spec_names))
    if ctx.enable_metrics and (final or (first and streaming)):
        meta.update(_metric_timestamps(job, ctx, final=final, streaming=streaming))
    return meta


def _metric_timestamps(
    job: SimJob, ctx: ShapeContext, *, final: bool, streaming: bool
) -> dict[str, Any]:
    sent = ctx.now()
    if not final:
        return {"response_sent_to_client_ts": sent}
    received = float(FIXED_CREATED) if ctx.deterministic else job.arrival_unix_s
    finished = received + _seconds(ctx, job.arrival_ns, job.finish_ns)
    first_ns = job.emit_ns[0] if job.emit_ns else None
    decode_s = _seconds(ctx, first_ns, job.finish_ns)
    out: dict[str, Any] = {
        "request_received_ts": received,
        "api_server_dispatch_finish_ts": received,
    }
    if streaming:
        out["response_sent_to_client_ts"] = sent
    out["request_finished_ts"] = finished
    out["decode_throughput"] = (job.produced - 1) / decode_s if decode_s > 0 else 0.0
    if not streaming:
        out["response_sent_to_client_ts"] = sent
    return out


def generate_body(
    job: SimJob,
    ctx: ShapeContext,
    *,
    ids: list[int],
    text: str,
    final: bool,
    first: bool,
    streaming: bool,
) -> dict[str, Any]:
    """A /generate body (or cumulative stream event) for the output ``ids`` decoded as ``text``."""
    meta = meta_info(
        job, ctx, completion_tokens=len(ids), final=final, first=first, streaming=streaming
    )
    return {"text": text, "output_ids": ids, "meta_info": meta}


def usage(
    job: SimJob, completion_tokens: int | None = None, *, with_details: bool = True
) -> dict[str, Any]:
    """OpenAI ``usage``: final counts, or ``completion_tokens`` so far (continuous usage)."""
    completion = job.produced if completion_tokens is None else completion_tokens
    out: dict[str, Any] = {
        "prompt_tokens": job.prompt_tokens,
        "total_tokens": job.prompt_tokens + completion,
        "completion_tokens": completion,
    }
    if with_details:
        out["prompt_tokens_details"] = None
    out["reasoning_tokens"] = 0
    return out


def sglext(job: SimJob, ctx: ShapeContext) -> dict[str, Any] | None:
    """Response-level ``sglext`` (0.5.19+ ``spec_tokens_details``), or None when empty."""
    if not ctx.spec_details or job.spec is None:
        return None
    details = job.spec.tokens_details(job.produced)
    return None if details is None else {"spec_tokens_details": details}


def _envelope(
    ctx: ShapeContext, obj: str, created: int, choices: list[dict[str, Any]]
) -> dict[str, Any]:
    """The keys every OpenAI-route body and chunk starts with, in SGLang's order."""
    return {
        "id": ctx.response_id,
        "object": obj,
        "created": created,
        "model": ctx.model,
        "choices": choices,
    }


def _openai_body(
    job: SimJob, ctx: ShapeContext, obj: str, choice: dict[str, Any]
) -> dict[str, Any]:
    """A non-streaming OpenAI-route body around ``choice``: usage, metadata, sglext."""
    body = _envelope(ctx, obj, ctx.created(), [choice])
    body["usage"] = usage(job)
    body["metadata"] = {"weight_version": "default"}
    ext = sglext(job, ctx)
    if ext is not None:
        body["sglext"] = ext
    return body


def completion_body(job: SimJob, ctx: ShapeContext, echo_text: str | None) -> dict[str, Any]:
    text = (echo_text or "") + detokenize(job.output_ids)
    choice = {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": job.finish_type,
        "matched_stop": matched_stop(job),
    }
    return _openai_body(job, ctx, "text_completion", choice)


def chat_body(job: SimJob, ctx: ShapeContext, *, with_meta_info: bool) -> dict[str, Any]:
    message = {
        "role": "assistant",
        "content": detokenize(job.output_ids),
        "reasoning_content": None,
        "tool_calls": None,
    }
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": job.finish_type,
        "matched_stop": matched_stop(job),
    }
    if with_meta_info:
        choice["meta_info"] = meta_info(
            job, ctx, completion_tokens=job.produced, final=True, first=False, streaming=False
        )
    return _openai_body(job, ctx, "chat.completion", choice)


def completion_chunk(
    ctx: ShapeContext,
    *,
    created: int,
    text: str,
    finish: str | None,
    matched: int | None,
    chunk_usage: dict[str, Any] | None,
) -> dict[str, Any]:
    choice = {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": finish,
        "matched_stop": matched,
    }
    chunk = _envelope(ctx, "text_completion", created, [choice])
    chunk["usage"] = chunk_usage
    return chunk


def chat_chunk(
    ctx: ShapeContext,
    *,
    created: int,
    delta: dict[str, Any],
    finish: str | None = None,
    matched: int | None = None,
    chunk_usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    choice = {
        "index": 0,
        "delta": {"reasoning_content": None, **delta},
        "logprobs": None,
        "finish_reason": finish,
        "matched_stop": matched,
    }
    chunk = _envelope(ctx, "chat.completion.chunk", created, [choice])
    if chunk_usage is not None:
        chunk["usage"] = chunk_usage
    return chunk


def trailer_chunk(ctx: ShapeContext, obj: str, created: int, **extra: Any) -> dict[str, Any]:
    """A ``choices: []`` chunk (usage or sglext) after the finish event."""
    return _envelope(ctx, obj, created, []) | extra


def openai_error(message: str, err_type: str, code: int) -> dict[str, Any]:
    """SGLang's flat OpenAI-route error body (also the inner object of a stream error)."""
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": code}


def generate_error(message: str) -> dict[str, Any]:
    return {"error": {"message": message}}


def generate_stream_error(message: str) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "code": 400,
            "retryable": False,
        }
    }
