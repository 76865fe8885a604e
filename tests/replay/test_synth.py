"""Prompt synthesis: exact token lengths by the server's /tokenize, shared prefixes from hash ids."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from specproxy.backends.base import BackendSpec
from specproxy.backends.http import HttpBackend
from specproxy.core.records.model import Role
from specproxy.replay.servers import vocabulary
from specproxy.replay.synth import BLOCK_TOKENS, PromptSynthesizer, calibrate
from specproxy.replay.tokenizer import ServerTokenCounter, TokenizerUnavailable
from specproxy.sim.server import serve_in_background
from tests.replay.conftest import fast_sim


@pytest.fixture
async def sim_backend() -> AsyncIterator[HttpBackend]:
    async with serve_in_background(fast_sim()) as url:
        backend = HttpBackend(BackendSpec(url, Role.BASELINE))
        await backend.start()
        try:
            yield backend
        finally:
            await backend.close()


async def test_synthesised_prompts_have_the_exact_token_length(sim_backend: HttpBackend) -> None:
    """Every synthesised prompt tokenizes, by the simulator's /tokenize, to the requested length."""
    counter = ServerTokenCounter(sim_backend)
    vocab = await calibrate(counter)
    assert vocab.source == "server_tokenizer"
    assert vocab.exact
    synth = PromptSynthesizer(vocab)
    lengths = [1, 2, 3, 50, 511, 512, 513, 1024, 1500, 4097]
    prompts = [synth.prompt(n, (4, 5), f"rec:{n}") for n in lengths]
    prompts += [synth.prompt(n, (), f"other:{n}") for n in lengths]
    assert await counter.count(prompts) == lengths + lengths
    assert counter.max_model_len == 131072


async def test_shared_hash_ids_share_the_prefix_text(sim_backend: HttpBackend) -> None:
    """Requests with equal leading hash ids start with identical 512-token blocks, then differ."""
    vocab = await calibrate(ServerTokenCounter(sim_backend))
    synth = PromptSynthesizer(vocab)
    a = synth.prompt(1300, (10, 11, 12), "a").split(" ")
    b = synth.prompt(1300, (10, 11, 99), "b").split(" ")
    c = synth.prompt(1300, (77, 11, 12), "c").split(" ")
    assert a[: 2 * BLOCK_TOKENS] == b[: 2 * BLOCK_TOKENS]
    assert a[2 * BLOCK_TOKENS :] != b[2 * BLOCK_TOKENS :]
    assert a[:BLOCK_TOKENS] != c[:BLOCK_TOKENS]
    # a fresh synthesiser (another run) draws the same block for the same hash id
    assert (
        PromptSynthesizer(vocab, cache_blocks=1).prompt(700, (10,), "z").split(" ")[:BLOCK_TOKENS]
        == a[:BLOCK_TOKENS]
    )


async def test_records_without_hash_ids_share_nothing(sim_backend: HttpBackend) -> None:
    """Blocks without a hash id are keyed by the record, so two records never share a prefix."""
    synth = PromptSynthesizer(await calibrate(ServerTokenCounter(sim_backend)))
    first = synth.prompt(600, (), "file.csv:2").split(" ")
    second = synth.prompt(600, (), "file.csv:3").split(" ")
    assert first[:20] != second[:20]
    assert synth.prompt(600, (), "file.csv:2").split(" ") == first


async def test_no_tokenize_endpoint_falls_back_to_the_approximation() -> None:
    """A server without /tokenize gives the documented one-word-one-token approximation."""
    app = web.Application()
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    backend = HttpBackend(BackendSpec(f"http://127.0.0.1:{port}", Role.BASELINE))
    await backend.start()
    try:
        counter = ServerTokenCounter(backend)
        with pytest.raises(TokenizerUnavailable):
            await counter.count(["one two"])
        vocab = await vocabulary(counter)
        assert vocab.source == "approximation"
        assert not vocab.exact
        assert vocab.special_tokens == 0
        assert len(PromptSynthesizer(vocab).prompt(40, (), "x").split(" ")) == 40
    finally:
        await backend.close()
        await runner.cleanup()
