"""Parse the three generation routes' request bodies into one ``GenRequest``.

Covers what SGLang reads from ``/generate`` (``text`` or ``input_ids``,
``sampling_params``, ``stream``, ``rid``), ``/v1/completions`` (``prompt`` as a string,
a one-element list of strings or a list of token ids, ``echo``) and
``/v1/chat/completions`` (``messages``, ``max_completion_tokens``,
``return_meta_info``), with the shared OpenAI fields (``max_tokens``, ``temperature``,
``top_p``, ``top_k``, ``seed``, ``ignore_eos``, ``stream_options``,
``return_spec_tokens_details``). A body the simulator cannot serve raises
``InvalidRequest`` with SGLang's wording where known (the app turns it into a 400).
Batches and ``n > 1`` are refused. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specproxy.core.protocol.fields import lax_bool
from specproxy.sim.text import chat_prompt_ids, tokenize

GENERATE_DEFAULT_MAX_NEW_TOKENS = 128


class InvalidRequest(ValueError):
    """A request body the simulated server refuses with HTTP 400."""


@dataclass(frozen=True, slots=True)
class GenRequest:
    """One generation request, whatever route it came from."""

    prompt_ids: tuple[int, ...]
    max_new_tokens: int | None
    default_max: int
    ignore_eos: bool
    sampling_key: str
    stream: bool
    model: str
    rid: str | None = None
    echo_text: str | None = None
    include_usage: bool = False
    continuous_usage: bool = False
    return_meta_info: bool = False
    return_spec_details: bool = False
    temperature: float = 0.0  # 0: greedy; > 0: sampled from the target model (sim.target)

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise InvalidRequest("Prompt cannot be empty")


def _number(body: dict[str, Any], key: str, default: float | None) -> float | None:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{key}: expected a number, got {value!r}")
    return float(value)


def _max_tokens(value: object, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRequest(f"{key}: expected a non-negative integer, got {value!r}")
    return value


def _sampling_key(params: dict[str, Any], seed_key: str) -> str:
    temperature = _number(params, "temperature", 1.0)
    top_k = _number(params, "top_k", -1.0)
    if temperature == 0.0 or top_k == 1.0:
        return "greedy"
    top_p = _number(params, "top_p", 1.0)
    return f"t={temperature};p={top_p};k={top_k};seed={params.get(seed_key)}"


def _temperature(params: dict[str, Any], key: str) -> float:
    """The sampling temperature (0.0 when the key is greedy)."""
    if key == "greedy":
        return 0.0
    return float(_number(params, "temperature", 1.0) or 1.0)


def _check_context(prompt_ids: list[int], context_length: int) -> int:
    if len(prompt_ids) >= context_length:
        raise InvalidRequest(
            f"The input ({len(prompt_ids)} tokens) is longer than the model's context"
            f" length ({context_length} tokens)."
        )
    return context_length - len(prompt_ids)


def _token_list(value: object) -> list[int] | None:
    if (
        isinstance(value, list)
        and value
        and all(isinstance(i, int) and not isinstance(i, bool) for i in value)
    ):
        return list(value)
    return None


def parse_generate(body: dict[str, Any], *, context_length: int, model: str) -> GenRequest:
    """A ``/generate`` body."""
    text, input_ids = body.get("text"), body.get("input_ids")
    if isinstance(text, str) and input_ids is None:
        prompt = tokenize(text)
    elif text is None and (ids := _token_list(input_ids)) is not None:
        prompt = ids
    else:
        raise InvalidRequest("The simulator serves one prompt per request: `text` or `input_ids`")
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise InvalidRequest("sampling_params: expected an object")
    if int(params.get("n", 1) or 1) != 1:
        raise InvalidRequest("n > 1 is not supported by the simulator")
    room = _check_context(prompt, context_length)
    rid = body.get("rid")
    return GenRequest(
        prompt_ids=tuple(prompt),
        max_new_tokens=_max_tokens(params.get("max_new_tokens"), "max_new_tokens"),
        default_max=min(GENERATE_DEFAULT_MAX_NEW_TOKENS, room),
        ignore_eos=bool(params.get("ignore_eos", False)),
        sampling_key=(key := _sampling_key(params, "sampling_seed")),
        stream=_stream_flag(body),
        model=model,
        rid=rid if isinstance(rid, str) else None,
        temperature=_temperature(params, key),
    )


def _openai_common(
    body: dict[str, Any], route: str, prompt: list[int], context_length: int, model: str
) -> dict[str, Any]:
    if int(body.get("n", 1) or 1) != 1:
        raise InvalidRequest("n > 1 is not supported by the simulator")
    room = _check_context(prompt, context_length)
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise InvalidRequest("stream_options: expected an object")
    maximum = body.get("max_completion_tokens") if route == "chat" else None
    if maximum is None:
        maximum = body.get("max_tokens")
    limit = _max_tokens(maximum, "max_tokens")
    rid = body.get("rid")
    requested_model = body.get("model")
    return {
        "prompt_ids": tuple(prompt),
        "max_new_tokens": None if limit is None else min(limit, room),
        "default_max": room,
        "ignore_eos": bool(body.get("ignore_eos", False)),
        "sampling_key": (key := _sampling_key(body, "seed")),
        "temperature": _temperature(body, key),
        "stream": _stream_flag(body),
        "model": requested_model if isinstance(requested_model, str) else model,
        "rid": rid if isinstance(rid, str) else None,
        "include_usage": bool(options.get("include_usage", False)),
        "continuous_usage": bool(options.get("continuous_usage_stats", False)),
        "return_spec_details": bool(body.get("return_spec_tokens_details", False)),
    }


def parse_completions(body: dict[str, Any], *, context_length: int, model: str) -> GenRequest:
    """A ``/v1/completions`` body."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise InvalidRequest("Prompt cannot be empty")
        ids, echo_source = tokenize(prompt), prompt
    elif (token_ids := _token_list(prompt)) is not None:
        ids, echo_source = token_ids, ""
    else:
        raise InvalidRequest("The simulator serves one prompt per request: a string or token ids")
    fields = _openai_common(body, "completions", ids, context_length, model)
    echo = echo_source if body.get("echo") else None
    return GenRequest(**fields, echo_text=echo)


def parse_chat(body: dict[str, Any], *, context_length: int, model: str) -> GenRequest:
    """A ``/v1/chat/completions`` body."""
    messages = body.get("messages")
    if (
        not isinstance(messages, list)
        or not messages
        or not all(isinstance(m, dict) for m in messages)
    ):
        raise InvalidRequest("messages: expected a non-empty list of message objects")
    fields = _openai_common(body, "chat", chat_prompt_ids(messages), context_length, model)
    meta = bool(body.get("return_meta_info", False))
    if meta and fields["stream"]:
        raise InvalidRequest("return_meta_info is not supported with streaming")
    return GenRequest(**fields, return_meta_info=meta)


def _stream_flag(body: dict[str, Any]) -> bool:
    """``stream`` as SGLang's pydantic models read it ("false" does not stream)."""
    found = lax_bool(body.get("stream"))
    if found is None:
        raise InvalidRequest("stream: expected a boolean")
    return found
