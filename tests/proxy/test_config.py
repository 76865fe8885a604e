"""ProxyConfig: defaults, coercion from TOML strings, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from specproxy.backends.base import BackendKind
from specproxy.config import build
from specproxy.core.records.model import Role, SendMode
from specproxy.errors import ConfigError
from specproxy.proxy.config import ProxyConfig

B = "http://127.0.0.1:30000"
C = "http://127.0.0.1:30001"


def test_defaults_bind_loopback_and_bound_the_shadows() -> None:
    """Without options the proxy binds 127.0.0.1, mirrors to the baseline and bounds shadows."""
    config = ProxyConfig(baseline=B, candidate=C)
    assert config.host == "127.0.0.1"
    assert config.mode is SendMode.MIRROR
    assert config.primary is Role.BASELINE
    assert config.max_shadow_in_flight == 256
    assert config.max_body_bytes == 8 * 1024 * 1024
    assert config.record_text is False


def test_strings_from_toml_become_enums_and_paths() -> None:
    """Values read from TOML (strings) are coerced to SendMode, Role, BackendKind and Path."""
    config = build(
        ProxyConfig,
        {
            "baseline": B,
            "candidate": C,
            "mode": "split",
            "primary": "candidate",
            "kind": "openai",
            "run-dir": "somewhere",
        },
        {},
        "proxy.toml",
    )
    assert config.mode is SendMode.SPLIT
    assert config.primary is Role.CANDIDATE
    assert config.kind is BackendKind.OPENAI
    assert config.run_dir == Path("somewhere")


def test_unknown_key_is_rejected_by_name() -> None:
    """A misspelt key in the config file is an error naming the key and the file."""
    with pytest.raises(ConfigError, match=r"proxy\.toml: unknown key 'max_shadow'"):
        build(ProxyConfig, {"baseline": B, "candidate": C, "max_shadow": 3}, {}, "proxy.toml")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"baseline": B}, "mode mirror needs both URLs; missing: candidate"),
        ({"candidate": C, "mode": "passthrough"}, "needs the primary's URL"),
        ({"baseline": B, "candidate": C, "mode": "alternate"}, "mode must be one of"),
        ({"baseline": B, "candidate": C, "split": 1.5}, "split must be between 0 and 1"),
        ({"baseline": "localhost:1", "candidate": C}, "baseline must be an http"),
        ({"baseline": B, "candidate": C, "max_shadow_in_flight": 0}, "max_shadow_in_flight"),
        ({"baseline": B, "candidate": C, "shadow_deadline_s": 0}, "shadow_deadline_s"),
        ({"baseline": B, "candidate": C, "sticky_header": "x", "sticky_user": True}, "one of"),
        ({"baseline": B, "candidate": C, "primary": "both"}, "primary must be one of"),
    ],
)
def test_invalid_values_name_the_problem(options: dict[str, object], message: str) -> None:
    """Each invalid combination is refused with a message that names the offending key."""
    with pytest.raises(ConfigError, match=message):
        build(ProxyConfig, options, {}, "command line")


def test_passthrough_needs_only_the_primary() -> None:
    """Passthrough to the candidate works with only the candidate's URL configured."""
    config = ProxyConfig(candidate=C, mode="passthrough", primary="candidate")  # type: ignore[arg-type]
    assert config.sides == (Role.CANDIDATE,)


def test_api_keys_stay_out_of_repr() -> None:
    """The proxy's own and upstream API keys never appear in the config's repr."""
    config = ProxyConfig(
        baseline=B, candidate=C, api_key="k-own", baseline_api_key="k-b", candidate_api_key="k-c"
    )
    text = repr(config)
    assert "k-own" not in text
    assert "k-b" not in text
    assert "k-c" not in text


def test_workers_come_from_the_file_or_the_command_line_and_must_be_positive() -> None:
    """``workers`` defaults to 1, is read from the file (the command line wins), is at least 1,
    and goes with a trace recording (each worker writes a shard)."""
    assert ProxyConfig(baseline=B, candidate=C).workers == 1
    both = {"baseline": B, "candidate": C}
    assert build(ProxyConfig, {**both, "workers": 4}, {}, "proxy.toml").workers == 4
    assert build(ProxyConfig, {**both, "workers": 4}, {"workers": 2}, "proxy.toml").workers == 2
    with pytest.raises(ConfigError, match="workers must be >= 1, got 0"):
        build(ProxyConfig, {**both, "workers": 0}, {}, "proxy.toml")
    recording = build(ProxyConfig, {**both, "workers": 2, "record": True}, {}, "proxy.toml")
    assert (recording.workers, recording.record) == (2, True)
