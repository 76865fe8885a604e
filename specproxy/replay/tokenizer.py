"""What the replayer asks a server before sending: its model name, context length, tokenizer.

``ServerTokenCounter`` counts tokens through SGLang's ``POST /tokenize``
(``{"prompt": str | [str], "model"?}`` -> ``{"tokens", "count", "max_model_len"}``),
sending a list of prompts in one call when the server accepts lists and one call per
prompt otherwise. Any failure raises ``TokenizerUnavailable`` so the caller can fall
back to the documented approximation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from specproxy.backends.base import InfoReader
from specproxy.errors import BackendError, SpecproxyError

_PARALLEL = 16


class TokenizerUnavailable(SpecproxyError):
    """The server has no usable ``/tokenize`` endpoint."""


def _json(status: int, body: bytes) -> Any:
    if status != 200:
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


class ServerTokenCounter:
    """Counts tokens (special tokens included) with the server's own tokenizer."""

    def __init__(self, backend: InfoReader, *, model: str | None = None) -> None:
        self._backend = backend
        self._model = model
        self._batch: bool | None = None
        self.max_model_len: int | None = None

    def _payload(self, prompt: str | Sequence[str]) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt": prompt if isinstance(prompt, str) else list(prompt)}
        if self._model is not None:
            out["model"] = self._model
        return out

    async def _post(self, prompt: str | Sequence[str]) -> Any:
        try:
            status, body = await self._backend.post_json("/tokenize", self._payload(prompt))
        except BackendError as exc:
            raise TokenizerUnavailable(f"/tokenize failed: {exc}") from exc
        data = _json(status, body)
        if isinstance(data, dict) and isinstance(data.get("max_model_len"), int):
            self.max_model_len = data["max_model_len"]
        return data

    async def _one(self, text: str) -> int:
        data = await self._post(text)
        count = data.get("count") if isinstance(data, dict) else None
        if isinstance(count, bool) or not isinstance(count, int):
            raise TokenizerUnavailable("/tokenize gave no token count")
        return count

    async def _try_batch(self, texts: Sequence[str]) -> list[int] | None:
        data = await self._post(texts)
        counts = data.get("count") if isinstance(data, dict) else None
        if (
            isinstance(counts, list)
            and len(counts) == len(texts)
            and all(isinstance(c, int) and not isinstance(c, bool) for c in counts)
        ):
            return counts
        return None

    async def count(self, texts: Sequence[str]) -> list[int]:
        """Token counts of ``texts``, in order."""
        if not texts:
            return []
        if self._batch is not False:
            counts = await self._try_batch(texts)
            self._batch = counts is not None
            if counts is not None:
                return counts
        gate = asyncio.Semaphore(_PARALLEL)

        async def one(text: str) -> int:
            async with gate:
                return await self._one(text)

        return list(await asyncio.gather(*(one(t) for t in texts)))


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """The served model name and context length a server reports (None when it does not)."""

    model: str | None
    max_model_len: int | None


async def fetch_server_facts(backend: InfoReader) -> ServerFacts:
    """Read ``GET /v1/models``: the first card's ``id`` and ``max_model_len``.

    Raises BackendUnreachable / BackendTimeout when the server cannot be reached; any
    answer that is not a model list gives empty facts.
    """
    status, body = await backend.get("/v1/models")
    data = _json(status, body)
    cards = data.get("data") if isinstance(data, dict) else None
    if not isinstance(cards, list) or not cards or not isinstance(cards[0], dict):
        return ServerFacts(None, None)
    model = cards[0].get("id")
    length = cards[0].get("max_model_len")
    return ServerFacts(
        model if isinstance(model, str) else None,
        length if isinstance(length, int) and not isinstance(length, bool) else None,
    )
