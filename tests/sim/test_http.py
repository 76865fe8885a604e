"""HTTP surface rules the simulator shares with SGLang: auth, metrics switch, validation, headers."""

from __future__ import annotations

import json

import aiohttp
import pytest

from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from tests.sim.helpers import FAST, get, post_json

KEY = "sk-simulated-secret"
GENERATE = {"text": "hello", "sampling_params": {"max_new_tokens": 4}}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models"),
        ("GET", "/server_info"),
        ("GET", "/model_info"),
        ("POST", "/generate"),
        ("POST", "/v1/chat/completions"),
    ],
)
async def test_api_key_is_required_outside_health_and_metrics(method: str, path: str) -> None:
    """With --api-key, a missing or wrong Bearer token gets 401 {"error": "Unauthorized"}."""
    async with (
        serve_in_background(SimConfig(**FAST, api_key=KEY)) as url,
        aiohttp.ClientSession() as session,
    ):
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            async with session.request(method, url + path, json={}, headers=headers) as r:
                assert r.status == 401
                assert await r.json() == {"error": "Unauthorized"}


async def test_api_key_exemptions_and_verbatim_key_in_server_info() -> None:
    """/health and /metrics need no key; with the key the server info shows it verbatim."""
    async with (
        serve_in_background(SimConfig(**FAST, api_key=KEY)) as url,
        aiohttp.ClientSession() as session,
    ):
        assert (await get(session, url + "/health"))[0] == 200
        assert (await get(session, url + "/metrics"))[0] == 200
        auth = {"Authorization": f"Bearer {KEY}"}
        status, raw = await get(session, url + "/server_info", headers=auth)
        gen_status, _ = await post_json(session, url + "/generate", GENERATE, headers=auth)
    info = json.loads(raw)
    assert status == 200
    assert gen_status == 200
    assert info["api_key"] == KEY
    assert info["internal_states"][0]["api_key"] == KEY


async def test_metrics_can_be_switched_off_like_sglang() -> None:
    """Without --enable-metrics /metrics is a 404 and meta_info has no timing extras."""
    async with (
        serve_in_background(SimConfig(**FAST, enable_metrics=False)) as url,
        aiohttp.ClientSession() as session,
    ):
        status, _ = await get(session, url + "/metrics")
        _, raw = await post_json(session, url + "/generate", GENERATE)
        _, info = await get(session, url + "/server_info")
    meta = json.loads(raw)["meta_info"]
    assert status == 404
    assert "queue_time" not in meta
    assert "request_received_ts" not in meta
    assert "e2e_latency" in meta
    assert json.loads(info)["enable_metrics"] is False


async def test_invalid_requests_get_400_in_the_route_shape() -> None:
    """Bad JSON, empty prompts, over-long prompts and non-JSON content types get 400s."""
    async with (
        serve_in_background(SimConfig(**FAST, context_length=64)) as url,
        aiohttp.ClientSession() as session,
    ):
        async with session.post(url + "/generate", data=b"{not json") as r:
            assert r.status == 400
            assert "message" in (await r.json())["error"]
        status, raw = await post_json(session, url + "/v1/completions", {"prompt": ""})
        assert status == 400
        assert json.loads(raw)["code"] == 400
        long_prompt = {"model": "m", "messages": [{"role": "user", "content": "w " * 100}]}
        status, raw = await post_json(session, url + "/v1/chat/completions", long_prompt)
        assert status == 400
        assert "context length" in json.loads(raw)["message"]
        async with session.post(url + "/v1/completions", data=b"{}") as r:
            assert r.status == 400
        streaming_meta = {**long_prompt, "stream": True, "return_meta_info": True}
        streaming_meta["messages"] = [{"role": "user", "content": "x"}]
        status, _ = await post_json(session, url + "/v1/chat/completions", streaming_meta)
        assert status == 400


async def test_every_response_is_marked_simulated() -> None:
    """x-specproxy-simulated: true is on 200s, 404s and streams alike; server info says simulated."""
    async with serve_in_background(SimConfig(**FAST)) as url, aiohttp.ClientSession() as session:
        for path in ("/health", "/no-such-route", "/v1/models/other-model"):
            async with session.get(url + path) as r:
                assert r.headers["x-specproxy-simulated"] == "true"
        async with session.post(url + "/generate", json={**GENERATE, "stream": True}) as r:
            assert r.headers["x-specproxy-simulated"] == "true"
        _, raw = await get(session, url + "/server_info")
    assert json.loads(raw)["simulated"] is True


async def test_served_model_name_and_model_routes() -> None:
    """--served-model-name is the /v1/models id; an unknown model card is a 404 JSON error."""
    config = SimConfig(
        **FAST, model_path="org/model", served_model_name="served", revision="abc123"
    )
    async with serve_in_background(config) as url, aiohttp.ClientSession() as session:
        _, models = await get(session, url + "/v1/models")
        status, card = await get(session, url + "/v1/models/served")
        missing, _ = await get(session, url + "/v1/models/other")
        _, model_info = await get(session, url + "/model_info")
        _, info = await get(session, url + "/server_info")
    assert json.loads(models)["data"][0]["id"] == "served"
    assert status == 200
    assert json.loads(card)["root"] == "served"
    assert missing == 404
    assert json.loads(model_info)["model_path"] == "org/model"
    server_info = json.loads(info)
    assert server_info["revision"] == "abc123"
    assert server_info["served_model_name"] == "served"
    assert server_info["port"] == int(url.rsplit(":", 1)[1])


async def test_tokenize_accepts_a_list_of_prompts() -> None:
    """/v1/tokenize with a list returns one token list and one count per prompt."""
    async with serve_in_background(SimConfig(**FAST)) as url, aiohttp.ClientSession() as session:
        _, raw = await post_json(session, url + "/v1/tokenize", {"prompt": ["a b", "c d e"]})
    body = json.loads(raw)
    assert body["count"] == [2, 3]
    assert [len(t) for t in body["tokens"]] == [2, 3]


@pytest.mark.parametrize(
    ("value", "streams"), [("false", False), ("no", False), (0, False), ("True", True), (1, True)]
)
async def test_stream_flag_is_read_as_sglang_reads_it(value: object, streams: bool) -> None:
    """``stream`` strings and 0/1 mean what pydantic makes of them: "false" answers in one body."""
    body = {**GENERATE, "stream": value}
    async with serve_in_background(SimConfig(**FAST)) as url, aiohttp.ClientSession() as session:
        status, raw = await post_json(session, url + "/generate", body)
    assert status == 200
    assert raw.lstrip().startswith(b"{") is not streams
    assert raw.startswith(b"data:") is streams


async def test_unreadable_stream_flag_is_refused() -> None:
    """A ``stream`` value pydantic would refuse is a 400 from the simulator too."""
    body = {**GENERATE, "stream": "maybe"}
    async with serve_in_background(SimConfig(**FAST)) as url, aiohttp.ClientSession() as session:
        status, raw = await post_json(session, url + "/generate", body)
    assert status == 400
    assert b"stream" in raw
