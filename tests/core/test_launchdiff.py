"""Launch-config diffs on the real 0.5.16 captures: speculative vs other, implicit, series."""

from __future__ import annotations

from typing import Any

from specproxy.core.launch.config import (
    LaunchConfig,
    build_launch_config,
    diff_configs,
    diff_series,
)
from tests.launch.captures import RUN_B, model_info, server_info


def _config(server: str, run: str = "run_a_init0.1", **changes: Any) -> LaunchConfig:
    info = server_info(server, run)
    info.update(changes)
    return build_launch_config(info, model_info=model_info(server, run))


def _keys(diffs: Any) -> list[str]:
    return [d.key for d in diffs]


def test_base_vs_standalone_names_speculative_and_implicit_differences() -> None:
    """base vs sa_copy: six speculative settings, plus the implicit 48-request cap and KV pool."""
    diff = diff_configs(_config("base"), _config("sa_copy"))
    assert _keys(diff.speculative) == [
        "speculative_algorithm",
        "speculative_draft_model_path",
        "speculative_draft_model_revision",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
        "speculative_num_steps",
    ]
    other = {d.key: d for d in diff.other}
    assert {"max_running_requests", "effective_max_running_requests_per_dp"} <= set(other)
    assert {"max_total_num_tokens", "cuda_graph_config"} <= set(other)
    cap = other["max_running_requests"]
    assert (cap.baseline, cap.candidate, cap.implicit, cap.blocking) == (None, 48, True, True)
    assert "48" in cap.note
    assert other["effective_max_running_requests_per_dp"].baseline == 4096
    kv = other["max_total_num_tokens"]
    assert (kv.implicit, kv.blocking) == (True, False)
    assert "0.34" in kv.note
    assert "port" not in other
    assert "random_seed" not in other
    assert diff.matched is False
    assert {d.key for d in diff.blocking} == {
        "max_running_requests",
        "effective_max_running_requests_per_dp",
    }


def test_two_standalone_drafts_differ_in_one_speculative_setting() -> None:
    """sa_copy vs sa_small: only the draft path differs among settings; the KV pool is implicit."""
    diff = diff_configs(_config("sa_copy"), _config("sa_small"))
    assert _keys(diff.speculative) == ["speculative_draft_model_path"]
    assert all(d.implicit and not d.blocking for d in diff.other)
    assert "max_total_num_tokens" in _keys(diff.other)
    assert diff.matched is True
    assert diff.only_speculative is False


def test_standalone_vs_ngram_shows_resolved_ngram_settings() -> None:
    """sa_copy vs ngram: algorithm and the settings SGLang resolved for NGRAM (topk 10, 12 tokens)."""
    diff = diff_configs(_config("sa_copy"), _config("ngram"))
    spec = {d.key: (d.baseline, d.candidate) for d in diff.speculative}
    assert spec["speculative_algorithm"] == ("STANDALONE", "NGRAM")
    assert spec["speculative_eagle_topk"] == (1, 10)
    assert spec["speculative_num_draft_tokens"] == (4, 12)
    assert spec["speculative_num_steps"] == (3, 1)
    assert spec["speculative_draft_model_path"] == ("/tmp/models/draft_copy", None)
    assert diff.matched is True


def test_an_explicit_max_running_requests_on_both_removes_the_mismatch() -> None:
    """With 48 set on both sides (and the same effective cap) no blocking difference is left."""
    base = _config("base", max_running_requests=48)
    base_data = base.data
    base_data["measured"]["effective_max_running_requests_per_dp"] = 48
    diff = diff_configs(LaunchConfig.from_data(base_data), _config("sa_copy"))
    assert diff.matched is True
    assert "max_running_requests" not in _keys(diff.other)


def test_a_different_model_path_is_a_blocking_difference() -> None:
    """A baseline serving another model is named and makes the pair unmatched."""
    diff = diff_configs(_config("base", model_path="/tmp/models/other"), _config("sa_copy"))
    path = next(d for d in diff.other if d.key == "model_path")
    assert (path.blocking, path.implicit) == (True, False)
    assert "not a matched baseline" in path.describe()
    assert diff.matched is False


def test_two_baselines_of_different_weights_differ_in_model_paths_once() -> None:
    """Run A base vs run B base: model and tokenizer paths block, each named once; the label warns."""
    diff = diff_configs(_config("base"), _config("base_b", RUN_B))
    assert diff.speculative == ()
    assert {d.key for d in diff.blocking} == {"model_path", "tokenizer_path"}
    served = next(d for d in diff.other if d.key == "served_model_name")
    assert served.blocking is False
    assert not any(k.startswith("model_info.") for k in _keys(diff.other))


def test_series_points_out_steps_that_change_several_settings() -> None:
    """A series flags a step that changes two independent speculative settings at once."""
    first = _config("sa_copy")
    one_change = _config("sa_small")
    two_changes = _config(
        "sa_small",
        speculative_eagle_topk=2,
        speculative_num_steps=4,
        speculative_num_draft_tokens=8,
    )
    steps = diff_series([first, one_change, two_changes])
    assert [s.index for s in steps] == [1, 2]
    assert steps[0].independent_changes == ("speculative_draft_model_path",)
    assert steps[0].multiple_speculative_changes is False
    assert steps[1].multiple_speculative_changes is True
    assert set(steps[1].independent_changes) == {
        "speculative_eagle_topk",
        "speculative_num_steps",
        "speculative_num_draft_tokens",
    }


def test_series_treats_resolution_side_effects_as_one_change() -> None:
    """Steps 3 -> 5 with topk 1 also moves draft tokens 4 -> 6; that counts as one change."""
    longer = _config("sa_copy", speculative_num_steps=5, speculative_num_draft_tokens=6)
    (step,) = diff_series([_config("sa_copy"), longer])
    assert step.independent_changes == ("speculative_num_steps",)
    assert step.derived_changes == ("speculative_num_draft_tokens",)
    assert step.multiple_speculative_changes is False
    assert diff_series([longer]) == []


def test_gpu_placement_is_not_a_difference() -> None:
    """Two servers on different GPU indices of one host differ in no setting."""
    diff = diff_configs(_config("sa_copy", base_gpu_id=0), _config("sa_copy", base_gpu_id=4))
    assert diff.differences == ()
