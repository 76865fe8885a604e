"""Redaction of relayed reads fails closed, and upstream keys need not be on the command
line (issue 33, finding 10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from specproxy.cli import serve
from specproxy.proxy import server
from specproxy.testing.harness import CHAT_BODY, rig
from specproxy.testing.hostile import RawUpstream, exchange, fixed, unary

KEY = "sk-K3Y-74291"


@pytest.mark.parametrize(
    "body",
    [
        b'{"api_key": "' + KEY.encode() + b'", "x": NaN}',
        b'\xef\xbb\xbf{"api_key": "' + KEY.encode() + b'"}',
        b'{"apiKey": "' + KEY.encode() + b'"}',
        b'{"note": "Bearer ' + KEY.encode() + b'"}',
        b'{"api_key": "' + KEY.encode() + b'", "cut": ',  # broken JSON
        b"plain text: Authorization: Bearer " + KEY.encode(),
    ],
    ids=["nan", "bom", "camel", "bearer", "broken", "text"],
)
async def test_a_relayed_read_never_carries_a_key(tmp_path: Path, body: bytes) -> None:
    up = RawUpstream(fixed(unary(CHAT_BODY)))
    up.reads[b"/server_info"] = unary(body)
    async with up.running() as url, rig(tmp_path, baseline=url, mode="passthrough") as r:
        request = b"GET /server_info HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        status, _, got = await exchange(r.url, request)
    assert status == 200
    assert KEY.encode() not in got
    assert b"[redacted]" in got


async def test_a_read_without_a_secret_passes_byte_for_byte(tmp_path: Path) -> None:
    body = b'\xef\xbb\xbf{"x": NaN,   "model_path": "m", "max_tokens": 3}'
    up = RawUpstream(fixed(unary(CHAT_BODY)))
    up.reads[b"/server_info"] = unary(body)
    async with up.running() as url, rig(tmp_path, baseline=url, mode="passthrough") as r:
        request = b"GET /server_info HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        status, _, got = await exchange(r.url, request)
    assert (status, got) == (200, body)


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({"SPECPROXY_UPSTREAM_API_KEY": "both"}, ("both", "both")),
        ({"SPECPROXY_BASELINE_API_KEY": "b", "SPECPROXY_CANDIDATE_API_KEY": "c"}, ("b", "c")),
        ({"SPECPROXY_UPSTREAM_API_KEY": "u", "SPECPROXY_CANDIDATE_API_KEY": "c"}, ("u", "c")),
    ],
)
def test_serve_takes_upstream_keys_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], want: tuple[str, str]
) -> None:
    seen: list[Any] = []

    async def fake_run_proxy(config: Any, **_: Any) -> Path:
        seen.append(config)
        return tmp_path

    monkeypatch.setattr(server, "run_proxy", fake_run_proxy)
    args = ["--baseline", "http://127.0.0.1:1", "--candidate", "http://127.0.0.1:2"]
    args.append("--no-require-upstreams")  # no servers here: only the options are read
    result = CliRunner().invoke(serve.command, args, env=env)
    assert result.exit_code == 0, result.output
    (config,) = seen
    assert (config.baseline_api_key, config.candidate_api_key) == want
    assert KEY not in result.output
