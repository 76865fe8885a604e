"""The replayer's reads from the servers around a run, each failure mapped to a fallback.

Reachability is the only hard requirement (BackendUnreachable, exit status 3): a
server that answers but lacks ``/tokenize``, ``/server_info`` or ``/metrics`` still gets
traffic, with the approximation, no launch config or no snapshot noted instead.
``watch_queues`` samples SGLang's queue gauge during the run, where ``/metrics`` has it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from specproxy.backends.base import Backend, BackendSpec, InfoReader
from specproxy.backends.http import open_backend
from specproxy.backends.sglang import fetch_launch_config, fetch_snapshot
from specproxy.core.launch.config import LaunchConfig
from specproxy.core.protocol.prometheus import parse_exposition
from specproxy.core.records.model import Role
from specproxy.errors import BackendError, BackendUnreachable, ProtocolError, SpecproxyError
from specproxy.replay.synth import Vocabulary, approximate_vocabulary, calibrate
from specproxy.replay.tokenizer import (
    ServerFacts,
    ServerTokenCounter,
    TokenizerUnavailable,
    fetch_server_facts,
)
from specproxy.replay.trace import TraceRecord


async def check_reachable(backends: Mapping[Role, Backend]) -> ServerFacts:
    """Every backend answers ``/v1/models``; returns the first one's facts."""
    facts: ServerFacts | None = None
    for role, backend in backends.items():
        try:
            found = await fetch_server_facts(backend)
        except BackendError as exc:
            raise BackendUnreachable(f"{role.value} server {backend.spec.url}: {exc}") from exc
        facts = facts or found
    return facts or ServerFacts(None, None)


async def vocabulary(counter: ServerTokenCounter) -> Vocabulary:
    """The server tokenizer's calibrated vocabulary, or the approximation without ``/tokenize``."""
    try:
        return await calibrate(counter)
    except (TokenizerUnavailable, BackendError):
        return approximate_vocabulary()


async def reference_lengths(
    records: Sequence[TraceRecord],
    counter: ServerTokenCounter,
    vocab: Vocabulary | None,
    enabled: bool,
) -> dict[int, int]:
    """Output lengths taken from reference answers (position in ``records`` -> tokens).

    Counted with the server's tokenizer minus its special tokens; without ``/tokenize``,
    approximated as 4 tokens per 3 words.
    """
    if not enabled:
        return {}
    wanted = [(i, r.reference_answer) for i, r in enumerate(records) if r.reference_answer]
    texts = [text for _, text in wanted if text]
    try:
        counts = await counter.count(texts)
        special = vocab.special_tokens if vocab else 0
        lengths = [max(1, c - special) for c in counts]
    except (TokenizerUnavailable, BackendError):
        lengths = [max(1, round(len(t.split()) * 4 / 3)) for t in texts]
    return {i: n for (i, _), n in zip(wanted, lengths, strict=True)}


async def snapshot(backend: InfoReader) -> dict[str, Any] | None:
    """``fetch_snapshot`` for one side, or None when the server does not offer it."""
    try:
        return await fetch_snapshot(backend)
    except (SpecproxyError, ProtocolError):
        return None


async def launch_config(
    backend: InfoReader, declared: dict[str, str] | None = None
) -> LaunchConfig | None:
    """``fetch_launch_config`` for one side, or None when the server does not report one."""
    try:
        return await fetch_launch_config(backend, declared=declared or None)
    except SpecproxyError:
        return None


QUEUE_METRIC = "sglang:num_queue_reqs"


async def queue_length(reader: InfoReader) -> float | None:
    """``QUEUE_METRIC`` from the server's ``/metrics``, summed over its label sets; None when
    the server does not expose it (no ``--enable-metrics``, or not SGLang). Transport and
    parse failures raise (``SpecproxyError``)."""
    status, body = await reader.get("/metrics", timeout_s=5.0)
    if status != 200:
        return None
    text = body.decode("utf-8", errors="replace")
    # only the gauge's own lines are parsed: a server's whole scrape is thousands of lines,
    # read once a second on the sending loop
    wanted = "\n".join(line for line in text.splitlines() if line.startswith(QUEUE_METRIC))
    return parse_exposition(wanted).total(QUEUE_METRIC)


async def watch_queues(
    readers: Mapping[Role, InfoReader],
    active: Callable[[], tuple[Role, ...]],
    on_sample: Callable[[Role, float], None],
    every_s: float,
) -> None:
    """Until cancelled: every ``every_s``, each ``active()`` side's queue length to
    ``on_sample``. A side whose server does not expose the gauge is no longer asked; a
    failed read is skipped."""
    live = dict(readers)
    while live:
        for side in [s for s in active() if s in live]:
            try:
                queued = await queue_length(live[side])
            except SpecproxyError:
                continue
            if queued is None:
                del live[side]
            else:
                on_sample(side, queued)
        await asyncio.sleep(every_s)


async def proxy_status(via: str, api_key: str | None) -> dict[str, Any] | None:
    """A specproxy proxy's ``/_specproxy/status`` object, or None when it does not give one."""
    try:
        async with open_backend(BackendSpec(via.rstrip("/"), None, api_key=api_key)) as proxy:
            status, body = await proxy.get("/_specproxy/status", timeout_s=10.0)
        found = orjson.loads(body) if status == 200 else {}
    except (SpecproxyError, ValueError):  # unreachable, or not JSON (orjson's error is one)
        return None
    return found if isinstance(found, dict) else None
