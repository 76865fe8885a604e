"""Behaviour that depends on --sglang-version: sglext spec details, legacy names, newer info keys."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from tests.sim.helpers import FAST, event_kind, get, post_json, sse_payloads

CHAT = {
    "model": "m",
    "messages": [{"role": "user", "content": "explain"}],
    "max_tokens": 20,
    "return_spec_tokens_details": True,
}
COMPLETION = {
    "model": "m",
    "prompt": "explain",
    "max_tokens": 20,
    "return_spec_tokens_details": True,
}
DETAIL_KEYS = {
    "spec_accept_rate",
    "spec_accept_length",
    "spec_cap_length",
    "spec_block_accept_length",
    "spec_num_correct_drafts",
    "spec_num_proposed_drafts",
    "spec_verify_ct",
    "spec_correct_drafts_histogram",
    "spec_cap_lens_histogram",
}


def spec(version: str) -> SimConfig:
    return SimConfig(**FAST, speculative_algorithm="EAGLE", sglang_version=version)


def kinds(events: list[Any]) -> list[str]:
    """The kinds of the events from the finish event on (role and content events left out)."""
    return [k for k in map(event_kind, events) if k not in ("role", "content", "text")]


@pytest.mark.parametrize(
    ("path", "body"), [("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)]
)
async def test_spec_tokens_details_on_0_5_23_streams_and_bodies(path: str, body: dict) -> None:
    """0.5.23: a choices-[] sglext event sits between finish and usage; bodies get sglext too."""
    async with serve_in_background(spec("0.5.23")) as url, aiohttp.ClientSession() as session:
        stream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        _, stream = await post_json(session, url + path, stream_body)
        _, unary = await post_json(session, url + path, body)
    events = sse_payloads(stream)
    assert kinds(events) == ["finish", "sglext", "usage", "done"]
    details = events[-3]["sglext"]["spec_tokens_details"]
    assert set(details) == DETAIL_KEYS
    assert details["spec_accept_length"] == 20 / details["spec_verify_ct"]
    assert set(json.loads(unary)["sglext"]["spec_tokens_details"]) == DETAIL_KEYS


async def test_spec_tokens_details_are_ignored_by_0_5_16_and_by_baselines() -> None:
    """0.5.16 ignores return_spec_tokens_details; a 0.5.23 baseline has no spec details to add."""
    stream_chat = {**CHAT, "stream": True}
    async with (
        serve_in_background(spec("0.5.16")) as old,
        serve_in_background(SimConfig(**FAST, sglang_version="0.5.23")) as base,
        aiohttp.ClientSession() as session,
    ):
        for url in (old, base):
            _, stream = await post_json(session, url + "/v1/chat/completions", stream_chat)
            _, unary = await post_json(session, url + "/v1/chat/completions", CHAT)
            assert kinds(sse_payloads(stream)) == ["finish", "done"]
            assert "sglext" not in json.loads(unary)


async def test_return_meta_info_adds_native_meta_info_to_chat_choices() -> None:
    """Non-streaming chat with return_meta_info carries the full meta_info, spec fields included."""
    body = {**CHAT, "return_meta_info": True}
    async with serve_in_background(spec("0.5.16")) as url, aiohttp.ClientSession() as session:
        _, raw = await post_json(session, url + "/v1/chat/completions", body)
    meta = json.loads(raw)["choices"][0]["meta_info"]
    assert meta["completion_tokens"] == 20
    assert meta["spec_accept_length"] == 20 / meta["spec_verify_ct"]


async def test_legacy_spec_names_disappear_in_0_5_21() -> None:
    """spec_accepted_drafts and friends exist up to 0.5.20 and are gone from 0.5.21 on."""
    body = {"text": "x", "sampling_params": {"max_new_tokens": 12}}
    async with (
        serve_in_background(spec("0.5.20")) as old,
        serve_in_background(spec("0.5.21")) as new,
        aiohttp.ClientSession() as session,
    ):
        _, old_raw = await post_json(session, old + "/generate", body)
        _, new_raw = await post_json(session, new + "/generate", body)
    assert "spec_accepted_drafts" in json.loads(old_raw)["meta_info"]
    new_meta = json.loads(new_raw)["meta_info"]
    assert "spec_accepted_drafts" not in new_meta
    assert "spec_accept_histogram" not in new_meta
    assert "spec_correct_drafts_histogram" in new_meta


async def test_newer_versions_report_their_extra_info_keys() -> None:
    """0.5.23 server info has version, launch_command and frontend; /get_load is gone."""
    async with serve_in_background(spec("0.5.23")) as url, aiohttp.ClientSession() as session:
        _, raw = await get(session, url + "/server_info")
        _, model = await get(session, url + "/model_info")
        load_status, _ = await get(session, url + "/get_load")
    info = json.loads(raw)
    assert info["version"] == "0.5.23"
    assert "--speculative-algorithm EAGLE" in info["launch_command"]
    assert info["frontend"] == "python"
    assert "startup_time" in info
    assert json.loads(model)["served_model_name"] == SimConfig().model_name
    assert load_status == 404
