"""Speculative behaviour of the simulator: SGLang's argument resolution, meta_info relations, counters."""

from __future__ import annotations

import itertools
import json
from typing import Any

import aiohttp
import pytest

from specproxy.errors import ConfigError
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from tests.sim.helpers import FAST, get, post_json, sse_payloads

PROMPTS = [f"question number {i}: explain the speculative decoding of model {i}" for i in range(6)]


def spec_config(**overrides: Any) -> SimConfig:
    return SimConfig(**{**FAST, "speculative_algorithm": "EAGLE", **overrides})


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"speculative_algorithm": "EAGLE"}, ("EAGLE", 5, 4, 8)),
        ({"speculative_algorithm": "nextn"}, ("EAGLE", 5, 4, 8)),
        (
            {"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": "d"},
            ("STANDALONE", 3, 1, 4),
        ),
        (
            {
                "speculative_algorithm": "EAGLE3",
                "speculative_draft_model_path": "d",
                "speculative_num_steps": 4,
                "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": 9,
            },
            ("EAGLE3", 4, 1, 5),
        ),
        ({"speculative_algorithm": "NGRAM"}, ("NGRAM", 1, 10, 12)),
        (
            {
                "speculative_algorithm": "NGRAM",
                "speculative_num_draft_tokens": 24,
                "speculative_ngram_max_bfs_breadth": 4,
            },
            ("NGRAM", 6, 4, 24),
        ),
    ],
)
def test_speculative_flags_resolve_as_sglang_does(
    options: dict[str, Any], expected: tuple[str, int, int, int]
) -> None:
    """NEXTN becomes EAGLE, unset triples are auto-chosen, topk 1 rewrites draft tokens, NGRAM derives its own."""
    spec = SimConfig(**options).spec
    assert spec is not None
    assert (spec.algorithm, spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == expected


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        ({"speculative_algorithm": "EAGLE", "speculative_eagle_topk": 2}, "speculative_num_steps"),
        ({"speculative_algorithm": "EAGLE3"}, "speculative_draft_model_path"),
        ({"speculative_algorithm": "MEDUSA"}, "speculative_algorithm"),
        ({"accept_prob": 1.5}, "accept_prob"),
        ({"sglang_version": "latest"}, "sglang_version"),
    ],
)
def test_configurations_sglang_refuses_raise_config_errors(
    options: dict[str, Any], flag: str
) -> None:
    """A configuration SGLang would refuse at startup raises ConfigError naming the flag."""
    with pytest.raises(ConfigError, match=flag):
        SimConfig(**options)


def test_max_running_requests_defaults_like_sglang() -> None:
    """Speculative servers default to 48 running requests; a baseline reports null and runs 4096."""
    assert spec_config().reported_max_running_requests == 48
    assert SimConfig().reported_max_running_requests is None
    assert SimConfig().effective_max_running_requests == 4096
    assert SimConfig(max_running_requests=7).effective_max_running_requests == 7


def check_relations(meta: dict[str, Any], num_draft_tokens: int, max_accepted: int) -> None:
    completion, verify = meta["completion_tokens"], meta["spec_verify_ct"]
    assert meta["spec_accept_length"] == completion / verify
    assert meta["spec_num_proposed_drafts"] == verify * (num_draft_tokens - 1)
    assert meta["spec_accept_rate"] == meta["spec_num_correct_drafts"] / (
        verify * (num_draft_tokens - 1)
    )
    cut = verify + meta["spec_num_correct_drafts"] - (completion - 1)  # drafts past the end
    assert 0 <= cut <= max_accepted
    assert sum(meta["spec_correct_drafts_histogram"]) == verify
    assert len(meta["spec_correct_drafts_histogram"]) <= max_accepted + 1
    assert meta["spec_accepted_drafts"] == meta["spec_num_correct_drafts"]
    assert meta["spec_accept_histogram"] == meta["spec_correct_drafts_histogram"]


@pytest.mark.parametrize(
    ("options", "num_draft_tokens", "max_accepted"),
    [
        ({"speculative_algorithm": "EAGLE"}, 8, 5),
        ({"speculative_algorithm": "NGRAM"}, 12, 11),
        ({"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": "d"}, 4, 3),
    ],
)
async def test_meta_info_spec_fields_satisfy_sglang_relations(
    options: dict[str, Any], num_draft_tokens: int, max_accepted: int
) -> None:
    """accept_length = completion/verify_ct, proposed = verify_ct x (draft tokens - 1), and the rest."""
    config = spec_config(**options, accept_prob=0.8)
    async with serve_in_background(config) as url, aiohttp.ClientSession() as session:
        for prompt in PROMPTS:
            body = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": 40}}
            status, raw = await post_json(session, url + "/generate", body)
            assert status == 200
            check_relations(json.loads(raw)["meta_info"], num_draft_tokens, max_accepted)


async def test_spec_fields_only_on_the_final_stream_event_with_several_tokens_per_event() -> None:
    """Stream events carry several tokens each and only the last one has spec_* keys."""
    async with (
        serve_in_background(spec_config(accept_prob=0.9)) as url,
        aiohttp.ClientSession() as session,
    ):
        body = {"text": PROMPTS[0], "sampling_params": {"max_new_tokens": 64}, "stream": True}
        _, raw = await post_json(session, url + "/generate", body)
    events = [e for e in sse_payloads(raw) if e != "[DONE]"]
    counts = [e["meta_info"]["completion_tokens"] for e in events]
    assert counts[-1] == 64
    assert len(events) < 40
    assert max(b - a for a, b in itertools.pairwise(counts)) > 1
    assert all("spec_verify_ct" not in e["meta_info"] for e in events[:-1])
    check_relations(events[-1]["meta_info"], 8, 5)
    assert all(len(e["output_ids"]) == e["meta_info"]["completion_tokens"] for e in events)


async def test_baseline_reports_no_speculative_fields_or_counters() -> None:
    """A baseline's meta_info has no spec_* key and its server info no avg_spec_accept_length."""
    async with (
        serve_in_background(SimConfig(**FAST, decode_log_interval=1)) as url,
        aiohttp.ClientSession() as session,
    ):
        body = {"text": PROMPTS[0], "sampling_params": {"max_new_tokens": 20}}
        _, raw = await post_json(session, url + "/generate", body)
        _, info = await get(session, url + "/server_info")
        _, metrics = await get(session, url + "/metrics")
    assert not [k for k in json.loads(raw)["meta_info"] if k.startswith("spec_")]
    state = json.loads(info)["internal_states"][0]
    assert "avg_spec_accept_length" not in state
    assert state["effective_max_running_requests_per_dp"] == 4096
    assert b"spec_verify_calls_total" not in metrics


def metric_value(text: str, name: str) -> float:
    lines = [ln for ln in text.splitlines() if ln.startswith((name + "{", name + " "))]
    assert len(lines) == 1, lines
    return float(lines[0].rsplit(" ", 1)[1])


async def test_counters_sum_request_figures_and_flush_cache_resets_spec_average() -> None:
    """Prometheus counters add up per-request figures; /flush_cache clears avg_spec_accept_length."""
    config = spec_config(decode_log_interval=2, accept_prob=0.6)
    async with serve_in_background(config) as url, aiohttp.ClientSession() as session:
        _, before = await get(session, url + "/server_info")
        assert "avg_spec_accept_length" not in json.loads(before)["internal_states"][0]
        verify = completion = 0
        for prompt in PROMPTS:
            body = {"text": prompt, "sampling_params": {"max_new_tokens": 30}}
            _, raw = await post_json(session, url + "/generate", body)
            meta = json.loads(raw)["meta_info"]
            verify += meta["spec_verify_ct"]
            completion += meta["completion_tokens"]
        _, metrics = await get(session, url + "/metrics")
        text = metrics.decode()
        assert metric_value(text, "sglang:spec_verify_calls_total") == verify
        assert metric_value(text, "sglang:generation_tokens_total") == completion
        assert metric_value(text, "sglang:num_requests_total") == len(PROMPTS)
        assert 1.0 < metric_value(text, "sglang:spec_accept_length") <= 6.0
        _, after = await get(session, url + "/server_info")
        average = json.loads(after)["internal_states"][0]["avg_spec_accept_length"]
        assert 1.0 < average < completion / len(PROMPTS)
        _, loads = await get(session, url + "/v1/loads")
        assert json.loads(loads)["loads"][0]["speculative"]["accept_length"] == average
        async with session.post(url + "/flush_cache") as response:
            assert response.status == 200
            assert (await response.text()).startswith("Cache flushed.")
        _, flushed = await get(session, url + "/server_info")
        assert "avg_spec_accept_length" not in json.loads(flushed)["internal_states"][0]
