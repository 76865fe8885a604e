"""Launch configs from the real 0.5.16 captures: canonical form, redaction, fingerprint."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specproxy.core.launch.config import (
    REDACTED,
    LaunchConfig,
    build_launch_config,
    canonical_json,
    fingerprint_input,
    redact,
    redact_argv,
    redact_command,
    with_launcher,
)
from tests.launch.captures import launch_command, model_info, server_info

SECRET = "sk-do-not-store-4242"


def _config(info: dict[str, Any], **kw: Any) -> LaunchConfig:
    return build_launch_config(info, model_info=model_info("sa_copy"), **kw)


def _with_secrets(info: dict[str, Any]) -> dict[str, Any]:
    info["api_key"] = SECRET
    info["admin_api_key"] = SECRET + "-admin"
    info["launch_command"] = f"python -m sglang.launch_server --api-key {SECRET} --port 1"
    for state in info["internal_states"]:
        state["api_key"] = SECRET
        state["admin_api_key"] = SECRET
    return info


def test_canonical_json_is_independent_of_key_order() -> None:
    """Two dicts with the same content in different key order give the same canonical text."""
    assert canonical_json({"b": 1, "a": [1, {"y": 2, "x": 1}]}) == canonical_json(
        {"a": [1, {"x": 1, "y": 2}], "b": 1}
    )
    assert canonical_json({"a": 1.5}) == '{"a":1.5}'


def test_config_round_trips_through_its_stored_form() -> None:
    """to_dict() read back with from_dict() gives the same text and fingerprint."""
    config = _config(server_info("sa_copy"))
    again = LaunchConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert len(config.fingerprint) == 12
    assert all(c in "0123456789abcdef" for c in config.fingerprint)


def test_a_tampered_fingerprint_is_refused() -> None:
    """A stored config whose fingerprint does not match its content raises ValueError."""
    stored = _config(server_info("sa_copy")).to_dict()
    stored["server_args"]["speculative_num_steps"] = 5
    with pytest.raises(ValueError, match="fingerprint"):
        LaunchConfig.from_dict(stored)


def test_api_keys_never_reach_storage_or_fingerprint_input() -> None:
    """api_key, admin_api_key, internal_states copies and --api-key in commands are all redacted."""
    launcher = {"command": ["python3", "-m", "sglang.launch_server", "--api-key", SECRET]}
    config = _config(_with_secrets(server_info("sa_copy")), launcher=launcher)
    stored = json.dumps(config.to_dict())
    assert SECRET not in stored
    assert SECRET not in canonical_json(fingerprint_input(config.data))
    assert config.server_args["api_key"] == REDACTED
    assert config.data["launcher"]["command"][-2:] == ["--api-key", REDACTED]
    assert "--api-key [redacted]" in config.data["server_command"]


def test_command_redaction_covers_every_spelling() -> None:
    """--api-key VALUE, --api-key=VALUE and --admin-api-key lose their values, other flags stay."""
    text = f"x --api-key {SECRET} --admin-api-key={SECRET} --speculative-num-draft-tokens 4"
    assert SECRET not in redact_command(text)
    assert "--speculative-num-draft-tokens 4" in redact_command(text)
    argv = ["--api-key", SECRET, f"--admin-api-key={SECRET}", "--max-total-tokens", "9"]
    assert redact_argv(argv) == [
        "--api-key",
        REDACTED,
        f"--admin-api-key={REDACTED}",
        "--max-total-tokens",
        "9",
    ]


def test_capture_keys_are_not_mistaken_for_secrets() -> None:
    """Only credential fields of the real server info are redacted; token counts survive."""
    info = {k: (SECRET if v is None else v) for k, v in server_info("sa_copy").items()}
    redacted = redact(info)
    changed = sorted(k for k in info if redacted[k] != info[k])
    assert changed == ["admin_api_key", "api_key", "ssl_keyfile_password"]
    assert redacted["max_total_num_tokens"] == info["max_total_num_tokens"]
    assert redacted["bucket_time_to_first_token"] == info["bucket_time_to_first_token"]


def test_fingerprint_ignores_secrets_ports_seeds_and_internal_state() -> None:
    """Changing only api_key, port, a random seed or internal_states keeps the fingerprint."""
    reference = _config(server_info("sa_copy")).fingerprint
    info = _with_secrets(server_info("sa_copy"))
    info["port"] = 31999
    info["random_seed"] = 7
    info["internal_states"][0]["last_gen_throughput"] = 123.0
    info["internal_states"][0]["avg_spec_accept_length"] = 3.5
    assert _config(info).fingerprint == reference


def test_fingerprint_changes_with_a_speculative_setting() -> None:
    """A different num_steps (or draft path) gives a different fingerprint."""
    reference = _config(server_info("sa_copy")).fingerprint
    info = server_info("sa_copy")
    info["speculative_num_steps"] = 5
    assert _config(info).fingerprint != reference
    assert _config(server_info("sa_small")).fingerprint != reference


def test_an_explicit_random_seed_is_part_of_the_identity() -> None:
    """With --random-seed in the recorded command, the seed is hashed and stored as a setting."""
    launcher = {"command": [*launch_command("sa_copy"), "--random-seed", "1"]}
    first = _config(server_info("sa_copy"), launcher=launcher)
    info = server_info("sa_copy")
    info["random_seed"] = 2
    second = _config(info, launcher=launcher)
    assert first.data["random_seed_explicit"] is True
    assert first.fingerprint != second.fingerprint
    implicit = _config(server_info("sa_copy"))
    assert "random_seed" in implicit.data["noise"]
    assert "random_seed" not in implicit.server_args


def test_declared_facts_win_and_enter_the_fingerprint() -> None:
    """Declared GPU/driver override nvidia-smi facts, and changing them changes the fingerprint."""
    launcher = {"gpu": {"name": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0"}}
    recorded = _config(server_info("sa_copy"), launcher=launcher)
    declared = _config(server_info("sa_copy"), launcher=launcher, declared={"gpu": "H100"})
    assert recorded.data["facts"] == {"gpu": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0"}
    assert declared.data["facts"]["gpu"] == "H100"
    assert recorded.fingerprint != declared.fingerprint


def test_speculation_and_simulation_are_read_from_server_info() -> None:
    """The algorithm comes from speculative_algorithm; simulated comes from the server's flag."""
    base = _config(server_info("base"))
    sa = _config(server_info("sa_copy"))
    assert (base.speculation, base.speculative_algorithm) == (False, None)
    assert (sa.speculation, sa.speculative_algorithm) == (True, "STANDALONE")
    assert base.simulated is False
    simulated = _config({**server_info("base"), "simulated": True})
    assert simulated.simulated is True
    assert simulated.fingerprint != base.fingerprint


def test_a_config_without_server_info_is_incomplete() -> None:
    """A refused launch has only launcher facts: no server args, not complete."""
    config = build_launch_config(None, launcher={"command": ["python3", "-m", "x"]})
    assert config.server_args == {}
    assert config.complete is False
    with_info = _config(server_info("sa_copy"), launcher={"command": launch_command("sa_copy")})
    assert with_info.complete is True


_PLAIN = st.text(alphabet="abcdefghij", max_size=6)
_SECRET_VALUES = st.text(alphabet="xyz0123456789", min_size=1, max_size=8).map(
    lambda s: "SECRET-" + s
)
_TREES = st.recursive(
    _PLAIN | st.integers() | st.none(),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(_PLAIN, children, max_size=3)
        | st.dictionaries(st.sampled_from(["api_key", "admin_api_key"]), _SECRET_VALUES)
        | st.lists(_SECRET_VALUES.map(lambda v: f"--api-key {v}"), max_size=2)
    ),
    max_leaves=12,
)


@given(_TREES)
def test_redaction_removes_every_secret_anywhere(tree: Any) -> None:
    """However deeply nested, no value under a secret key or after --api-key survives."""
    assert "SECRET-" not in canonical_json(redact(tree))


def test_merging_a_launcher_record_later_equals_building_with_it() -> None:
    """with_launcher(config, record) gives exactly the config built with the record."""
    record = {
        "command": [*launch_command("sa_copy"), "--random-seed", "5", "--api-key", SECRET],
        "gpu": {"name": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0"},
        "env": {"SGLANG_X": "1"},
    }
    later = with_launcher(_config(server_info("sa_copy"), declared={"precision": "bf16"}), record)
    direct = _config(server_info("sa_copy"), declared={"precision": "bf16"}, launcher=record)
    assert later == direct
    assert later.data["random_seed_explicit"] is True
    assert SECRET not in later.canonical
