"""``/generate`` scoring requests on the simulator: teacher-forced log-probabilities.

A body with ``return_logprob`` and ``sampling_params.max_new_tokens == 0`` generates nothing:
the answer carries ``meta_info.input_token_logprobs`` from ``logprob_start_len`` on, the raw
log-probabilities of ``sim.target``'s model (see there), and no output. Every other body goes
to the ordinary generation handler. SIMULATED, like every answer of this server.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from aiohttp import web

from specproxy.sim.generation import sglang_error_response, sim_json_response
from specproxy.sim.state import SimServer
from specproxy.sim.target import input_token_logprobs
from specproxy.sim.text import tokenize


def _scoring_body(raw: bytes) -> dict[str, Any] | None:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict) or body.get("return_logprob") is not True:
        return None
    params = body.get("sampling_params")
    if not isinstance(params, dict) or params.get("max_new_tokens") != 0:
        return None
    return body


def _input_ids(body: dict[str, Any]) -> list[int] | None:
    text, ids = body.get("text"), body.get("input_ids")
    if isinstance(text, str) and ids is None:
        return tokenize(text)
    if (
        isinstance(ids, list)
        and ids
        and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    ):
        return list(ids)
    return None


async def answer(server: SimServer, request: web.Request) -> web.Response | None:
    """The scoring answer, or None when the request is not a scoring request."""
    if not server.ready():
        return None
    body = _scoring_body(await request.read())
    if body is None:
        return None
    ids = _input_ids(body)
    if ids is None:
        return sglang_error_response(
            "generate",
            "The simulator scores one prompt: `text` or `input_ids`",
            400,
            "BadRequestError",
        )
    start = body.get("logprob_start_len", -1)
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        start = len(ids)  # -1: output tokens only, and there are none
    rid = body.get("rid")
    meta = {
        "id": rid if isinstance(rid, str) else uuid.uuid4().hex,
        "finish_reason": {"type": "length", "length": 0},
        "prompt_tokens": len(ids),
        "completion_tokens": 0,
        "cached_tokens": 0,
        "input_token_logprobs": input_token_logprobs(ids, start),
        "output_token_logprobs": [],
        "e2e_latency": 0.0,
    }
    return sim_json_response({"text": "", "output_ids": [], "meta_info": meta})
