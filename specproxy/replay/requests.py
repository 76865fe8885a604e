"""Turn trace records into the exact HTTP requests the replayer sends.

- Records with a full body are sent as recorded (route and body unchanged; only
  ``model`` is replaced when ``--model`` is given).
- Text prompts and synthesised prompts go to ``RequestOptions.route``. The default is
  SGLang's native ``/generate``: it reports the prompt and completion token counts on
  every stream event and, on SGLang 0.5.16, the per-request speculative figures
  (``spec_verify_ct``...) that the OpenAI routes only carry from 0.5.19. On the OpenAI
  routes streams ask for usage (``stream_options.include_usage`` and
  ``continuous_usage_stats``) so token counts are the server's, not guessed.
- A recorded output length is requested exactly: ``ignore_eos`` plus the maximum
  (``max_new_tokens`` / ``max_tokens``) and, unless turned off, the same minimum
  (``min_new_tokens`` / ``min_tokens``). Text prompts without a length get
  ``default_output_tokens`` as a maximum and stop at EOS unless ``ignore_eos`` is set.
- A multi-turn text prompt on ``/generate`` or ``/v1/completions`` is flattened into
  ``User: ...`` / ``Assistant: ...`` paragraphs ending with ``Assistant:``; on chat it is
  sent as messages. On chat, the server's chat template adds its own tokens to a
  synthesised prompt, so ``prompt_tokens`` there exceeds the trace's input length by
  that fixed overhead.

Bodies are serialised once, to bytes, before their send time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from specproxy.backends.base import UpstreamRequest
from specproxy.core.records.model import Route
from specproxy.replay.synth import PromptSynthesizer
from specproxy.replay.trace import Message, TraceRecord


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """How prompts are turned into requests (see the module docstring); they always stream."""

    route: Route = Route.GENERATE
    model: str | None = None
    default_output_tokens: int = 256
    temperature: float = 0.0
    ignore_eos: bool = False
    min_tokens: bool = True
    spec_details: bool = False  # ask SGLang >= 0.5.19 for sglext.spec_tokens_details

    def __post_init__(self) -> None:
        if self.default_output_tokens < 1:
            raise ValueError("default_output_tokens must be >= 1")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")

    def sampling(self) -> dict[str, Any]:
        """The sampling conditions, as experiment.json records them."""
        return {
            "route": self.route.value,
            "temperature": self.temperature,
            "stream": True,
            "ignore_eos_for_text_prompts": self.ignore_eos,
            "ignore_eos_for_recorded_lengths": True,
            "min_tokens": self.min_tokens,
            "default_output_tokens": self.default_output_tokens,
            "model": self.model,
            "return_spec_tokens_details": self.spec_details,
        }


def flatten(messages: Sequence[Message]) -> str:
    """One prompt string for the text routes (see the module docstring)."""
    if len(messages) == 1:
        return messages[0][1]
    names = {"system": "System", "user": "User", "assistant": "Assistant"}
    parts = [f"{names[role]}: {content}" for role, content in messages]
    return "\n\n".join([*parts, "Assistant:"])


def _generate_body(
    prompt: str, output_tokens: int, *, exact: bool, ignore_eos: bool, opts: RequestOptions
) -> dict[str, Any]:
    sampling: dict[str, Any] = {"max_new_tokens": output_tokens, "temperature": opts.temperature}
    if ignore_eos:
        sampling["ignore_eos"] = True
    if exact and opts.min_tokens:
        sampling["min_new_tokens"] = output_tokens
    return {"text": prompt, "sampling_params": sampling, "stream": True}


def _openai_body(
    route: Route,
    prompt: str | Sequence[Message],
    output_tokens: int,
    *,
    exact: bool,
    ignore_eos: bool,
    opts: RequestOptions,
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": opts.model or "default"}
    if route is Route.CHAT:
        turns = [("user", prompt)] if isinstance(prompt, str) else list(prompt)
        body["messages"] = [{"role": role, "content": content} for role, content in turns]
    else:
        body["prompt"] = prompt if isinstance(prompt, str) else flatten(prompt)
    body["max_tokens"] = output_tokens
    body["temperature"] = opts.temperature
    if ignore_eos:
        body["ignore_eos"] = True
    if exact and opts.min_tokens:
        body["min_tokens"] = output_tokens
    body["stream"] = True
    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    if opts.spec_details:
        body["return_spec_tokens_details"] = True
    return body


def build_request(
    record: TraceRecord,
    opts: RequestOptions,
    *,
    synthetic_prompt: str | None = None,
    output_tokens: int | None = None,
) -> UpstreamRequest:
    """The request for ``record``; length records need ``synthetic_prompt`` (their text).

    ``output_tokens`` overrides the record's own output length (e.g. a reference answer's
    length, or a length clamped to the context).
    """
    if record.body is not None and record.route is not None:
        body = dict(record.body)
        if opts.model is not None and record.route is not Route.GENERATE:
            body["model"] = opts.model
        return UpstreamRequest(record.route, orjson.dumps(body), bool(body.get("stream")))
    wanted = output_tokens if output_tokens is not None else record.output_tokens
    exact = wanted is not None
    if record.synthetic_prompt:
        if synthetic_prompt is None:
            raise ValueError(f"{record.source}: a length-only record needs its synthesised prompt")
        prompt: str | Sequence[Message] = synthetic_prompt
        ignore_eos = True
    else:
        prompt = record.messages
        ignore_eos = opts.ignore_eos or exact
    n = wanted if wanted is not None else opts.default_output_tokens
    if opts.route is Route.GENERATE:
        text = prompt if isinstance(prompt, str) else flatten(prompt)
        body = _generate_body(text, n, exact=exact, ignore_eos=ignore_eos, opts=opts)
    else:
        body = _openai_body(opts.route, prompt, n, exact=exact, ignore_eos=ignore_eos, opts=opts)
    return UpstreamRequest(opts.route, orjson.dumps(body), True)


class RequestSource:
    """Builds (and briefly caches) the request of each trace record, on demand.

    Owns the synthesiser's use: length records get their prompt text here, in memory
    only. The cache holds the ``capacity`` most recently built requests, so a mirrored
    or alternated request is serialised once and long traces stay bounded in memory.
    """

    def __init__(
        self,
        records: Sequence[TraceRecord],
        opts: RequestOptions,
        *,
        synthesizer: PromptSynthesizer | None = None,
        output_tokens: Mapping[int, int] | None = None,
        capacity: int = 256,
    ) -> None:
        self._records = records
        self._opts = opts
        self._synth = synthesizer
        self._output = dict(output_tokens or {})
        self._cache: OrderedDict[int, UpstreamRequest] = OrderedDict()
        self._capacity = max(1, capacity)

    def record(self, index: int) -> TraceRecord:
        return self._records[index]

    def get(self, index: int) -> UpstreamRequest:
        """The request for record ``index`` (built now unless cached)."""
        cached = self._cache.get(index)
        if cached is not None:
            self._cache.move_to_end(index)
            return cached
        record = self._records[index]
        prompt = None
        if record.synthetic_prompt:
            if self._synth is None:
                raise ValueError("length-only records need a prompt synthesiser")
            prompt = self._synth.prompt(record.input_tokens or 1, record.hash_ids, record.source)
        built = build_request(
            record, self._opts, synthetic_prompt=prompt, output_tokens=self._output.get(index)
        )
        self._cache[index] = built
        if len(self._cache) > self._capacity:
            self._cache.popitem(last=False)
        return built
