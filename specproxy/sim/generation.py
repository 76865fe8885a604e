"""HTTP handlers of the three generation routes, streaming and not.

A handler parses the body, submits one ``SimJob`` to the engine, then writes one SSE
event per engine emission (or waits for the end, without streaming). Framing follows
SGLang: ``/generate`` sends its headers at once, the OpenAI routes only with their
first event (SGLang starts the response after the first output); every stream ends
with ``data: [DONE]``. Faults from the request's ``FaultPlan`` happen here: a stall
pauses before an event, a failure writes SGLang's in-stream error event then
``[DONE]`` (HTTP 500 without streaming), a truncation closes the connection without
``[DONE]``. Whatever way the handler ends (client gone included), its job is aborted
so the engine stops spending steps on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from specproxy.core.protocol.sse import encode_json_event
from specproxy.sim import shapes
from specproxy.sim.engine import SimJob
from specproxy.sim.faults import FaultPlan
from specproxy.sim.requests import (
    GenRequest,
    InvalidRequest,
    parse_chat,
    parse_completions,
    parse_generate,
)
from specproxy.sim.state import SimServer
from specproxy.sim.text import detokenize

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
DONE = b"data: [DONE]\n\n"
FAULT_MESSAGE = "Internal server error (simulated fault)"
PARSERS: dict[str, Callable[..., GenRequest]] = {
    "generate": parse_generate,
    "completions": parse_completions,
    "chat": parse_chat,
}


def sim_json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


def sglang_error_response(route: str, message: str, status: int, err_type: str) -> web.Response:
    """SGLang's error body for ``route`` (flat OpenAI shape, or /generate's nested one)."""
    if route == "generate":
        return sim_json_response(shapes.generate_error(message), status)
    return sim_json_response(shapes.openai_error(message, err_type, status), status)


async def next_emission(job: SimJob, index: int) -> bool:
    """Wait until emission ``index`` exists (True) or the job ended without it (False)."""
    while len(job.emissions) <= index and not job.done:
        job.changed.clear()
        await job.changed.wait()
    return len(job.emissions) > index


def fault_due(at: int | None, job: SimJob, index: int) -> bool:
    """A fault planned at ``at`` fires at ``index`` (or at the last emission, if earlier)."""
    if at is None:
        return False
    return index >= at or (job.done and index >= len(job.emissions) - 1)


async def handle(server: SimServer, request: web.Request, route: str) -> web.StreamResponse:
    """Serve one generation request on ``route`` ("generate", "completions" or "chat")."""
    if not server.ready():
        return sglang_error_response(route, "The server is starting up.", 503, "ServiceUnavailable")
    raw = await request.read()
    try:
        body = orjson.loads(raw)
        if not isinstance(body, dict):
            raise InvalidRequest("request body must be a JSON object")
        gen = PARSERS[route](
            body, context_length=server.config.context_length, model=server.config.model_name
        )
    except (InvalidRequest, orjson.JSONDecodeError, TypeError, ValueError) as exc:
        return sglang_error_response(route, str(exc), 400, "BadRequestError")
    rid = server.response_id(gen, raw)
    job = server.new_job(gen, rid)
    faults = server.faults.plan(len(job.plan.token_ids))
    server.engine.submit(job)
    try:
        if gen.stream:
            return await _STREAMS[route](server, request, gen, job, faults).run()
        return await _unary(server, route, gen, job, faults)
    finally:
        job.finish_aborted("client disconnected")


async def _unary(
    server: SimServer, route: str, gen: GenRequest, job: SimJob, faults: FaultPlan
) -> web.Response:
    """Wait for the end (one wake-up, not one per step), or fail as ``fault_due`` says."""
    if faults.fail_at is None:
        await job.ended.wait()
    else:  # emission fail_at, or the last one when the job ends sooner
        await next_emission(job, faults.fail_at)
        if job.emissions:
            job.finish_aborted(FAULT_MESSAGE)
            return sglang_error_response(route, FAULT_MESSAGE, 500, "InternalServerError")
    ctx = server.shape_context(gen, job.rid)
    if route == "generate":
        ids = list(job.output_ids)
        body = shapes.generate_body(
            job, ctx, ids=ids, text=detokenize(ids), final=True, first=True, streaming=False
        )
    elif route == "completions":
        body = shapes.completion_body(job, ctx, gen.echo_text)
    else:
        body = shapes.chat_body(job, ctx, with_meta_info=gen.return_meta_info)
    return sim_json_response(body)


class _Stream:
    """One SSE response: walks the job's emissions, applies faults, writes events."""

    prepare_at_once = False

    def __init__(
        self,
        server: SimServer,
        request: web.Request,
        gen: GenRequest,
        job: SimJob,
        faults: FaultPlan,
    ) -> None:
        self.server = server
        self.request = request
        self.gen = gen
        self.job = job
        self.faults = faults
        self.ctx = server.shape_context(gen, job.rid)
        self.created = self.ctx.created()
        self.sent_tokens = 0
        self.response = web.StreamResponse(headers={"Content-Type": SSE_CONTENT_TYPE})

    async def write(self, obj: Any) -> None:
        await self.write_raw(encode_json_event(obj))

    async def write_raw(self, data: bytes) -> None:
        if not self.response.prepared:
            await self.response.prepare(self.request)
        await self.response.write(data)

    async def run(self) -> web.StreamResponse:
        try:
            return await self._run()
        except ConnectionError:  # the client went away mid-stream; handle() aborts the job
            return self.response

    async def _run(self) -> web.StreamResponse:
        if self.prepare_at_once:
            await self.response.prepare(self.request)
        index, final_sent = 0, False
        while not final_sent and await next_emission(self.job, index):
            if index == self.faults.stall_at:
                await asyncio.sleep(self.server.config.stall_s)
            if fault_due(self.faults.fail_at, self.job, index):
                self.job.finish_aborted(FAULT_MESSAGE)
                await self.write(self.error_event())
                await self.write_raw(DONE)
                return self.response
            if fault_due(self.faults.truncate_at, self.job, index):
                return await self.truncate()
            final_sent = self.job.done and index == len(self.job.emissions) - 1
            await self.emit(index, self.job.emissions[index], final=final_sent)
            index += 1
        if not final_sent:
            await self.emit(index, self.job.produced, final=True)
        await self.trailers()
        await self.write_raw(DONE)
        return self.response

    async def truncate(self) -> web.StreamResponse:
        self.job.finish_aborted("connection closed (simulated fault)")
        if not self.response.prepared:
            await self.response.prepare(self.request)
        transport = self.request.transport
        if transport is not None:
            transport.close()
        return self.response

    def new_text(self, upto: int) -> str:
        text = detokenize(self.job.plan.token_ids[self.sent_tokens : upto])
        self.sent_tokens = upto
        return text

    def error_event(self) -> dict[str, Any]:
        return {"error": shapes.openai_error(FAULT_MESSAGE, "InternalServerError", 500)}

    async def emit(self, index: int, upto: int, *, final: bool) -> None:
        raise NotImplementedError

    async def trailers(self) -> None:
        """Events between the finish event and ``[DONE]`` (sglext, usage)."""


class _GenerateStream(_Stream):
    prepare_at_once = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.text = ""

    def error_event(self) -> dict[str, Any]:
        return shapes.generate_stream_error(FAULT_MESSAGE)

    async def emit(self, index: int, upto: int, *, final: bool) -> None:
        self.text += self.new_text(upto)
        ids = list(self.job.plan.token_ids[:upto])
        body = shapes.generate_body(
            self.job,
            self.ctx,
            ids=ids,
            text=self.text,
            final=final,
            first=index == 0,
            streaming=True,
        )
        await self.write(body)


class _CompletionsStream(_Stream):
    async def emit(self, index: int, upto: int, *, final: bool) -> None:
        text = self.new_text(upto)
        if index == 0 and self.gen.echo_text:
            text = self.gen.echo_text + text
        chunk = shapes.completion_chunk(
            self.ctx,
            created=self.created,
            text=text,
            finish=self.job.finish_type if final else None,
            matched=shapes.matched_stop(self.job) if final else None,
            chunk_usage=shapes.usage(self.job, upto) if self.gen.continuous_usage else None,
        )
        await self.write(chunk)

    async def trailers(self) -> None:
        ext = shapes.sglext(self.job, self.ctx)
        obj = "text_completion"
        if ext is not None:
            await self.write(
                shapes.trailer_chunk(self.ctx, obj, self.created, usage=None, sglext=ext)
            )
        if self.gen.include_usage:
            usage = shapes.usage(self.job, with_details=False)
            await self.write(shapes.trailer_chunk(self.ctx, obj, self.created, usage=usage))


class _ChatStream(_Stream):
    def chunk_created(self) -> int:
        """Per-chunk wall time before SGLang 0.5.23, one value per stream from then on."""
        return self.created if self.server.version >= (0, 5, 23) else self.ctx.created()

    async def emit(self, index: int, upto: int, *, final: bool) -> None:
        if index == 0:
            role = {"role": "assistant", "content": ""}
            await self.write(shapes.chat_chunk(self.ctx, created=self.chunk_created(), delta=role))
        text = self.new_text(upto)
        if text:
            usage = shapes.usage(self.job, upto) if self.gen.continuous_usage else None
            chunk = shapes.chat_chunk(
                self.ctx, created=self.chunk_created(), delta={"content": text}, chunk_usage=usage
            )
            await self.write(chunk)
        if final:
            chunk = shapes.chat_chunk(
                self.ctx,
                created=self.chunk_created(),
                delta={},
                finish=self.job.finish_type,
                matched=shapes.matched_stop(self.job),
            )
            await self.write(chunk)

    async def trailers(self) -> None:
        ext = shapes.sglext(self.job, self.ctx)
        obj = "chat.completion.chunk"
        if ext is not None:
            await self.write(shapes.trailer_chunk(self.ctx, obj, self.chunk_created(), sglext=ext))
        if self.gen.include_usage:
            usage = shapes.usage(self.job)
            await self.write(shapes.trailer_chunk(self.ctx, obj, self.chunk_created(), usage=usage))


_STREAMS: dict[str, type[_Stream]] = {
    "generate": _GenerateStream,
    "completions": _CompletionsStream,
    "chat": _ChatStream,
}
