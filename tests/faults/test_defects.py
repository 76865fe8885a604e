"""The leaks and edge cases of issue 14, each reproduced as the issue describes it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import orjson
import pytest

from specproxy.sim.config import SimConfig
from specproxy.testing.harness import chat, records, rig
from tests.faults.upstream import FAULT_HEADER, FaultServer, fault_rig

MARKER = "quokka-marker-55102"
FAST = SimConfig(decode_step_ms=0.2, prefill_us_per_token=1.0)


def run_dir_text(run_dir: Path) -> str:
    """Every file under ``run_dir`` as text."""
    return "\n".join(p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file())


async def test_server_info_through_the_proxy_carries_no_upstream_key(tmp_path: Path) -> None:
    """/server_info and /get_server_info relayed from a keyed SGLang server hold no key."""
    sim = SimConfig(api_key="SECRET123", decode_step_ms=0.2)
    async with rig(tmp_path, baseline=sim, mode="passthrough", baseline_api_key="SECRET123") as r:
        answers = [await r.get(path) for path in ("/server_info", "/get_server_info")]
        direct = await r.get("/server_info", base=r.baseline)
    assert b"SECRET123" not in direct[2] or direct[0] != 200  # the server itself does show it
    for status, content_type, body in answers:
        assert status == 200
        assert content_type.startswith("application/json")
        assert b"SECRET123" not in body
        info = orjson.loads(body)
        assert info["api_key"] == "[redacted]"
        assert info["model_path"]  # the rest is still there


async def test_reads_without_secrets_pass_byte_for_byte(tmp_path: Path) -> None:
    """A relayed read that holds no credential is the server's body unchanged."""
    async with rig(tmp_path, baseline=FAST, mode="passthrough") as r:
        through = await r.get("/v1/models")
        direct = await r.get("/v1/models", base=r.baseline)
    assert through[2] == direct[2]


@pytest.mark.parametrize("fault", ["echo400", "echo422", "text500", "stream_error"])
async def test_echoed_prompt_never_reaches_the_run_directory(tmp_path: Path, fault: str) -> None:
    """An upstream error that quotes the prompt is recorded by status and structure only."""
    upstream = FaultServer("baseline", default=fault)
    async with fault_rig(tmp_path, baseline=upstream, mode="passthrough") as r:
        status, body = await r.post(chat(f"please {MARKER} now", stream=fault == "stream_error"))
    assert status == (200 if fault == "stream_error" else int(fault[-3:]))
    assert (
        MARKER in body.decode()
    )  # the client gets the server's own answer, as docs/contract.md says
    (record,) = records(tmp_path)
    assert record["error_kind"] in {"http_4xx", "http_5xx", "stream_error"}
    assert record["error_message"]
    assert MARKER not in run_dir_text(tmp_path)


@pytest.mark.parametrize(
    "header",
    [
        b"Authorization: Bearer " + MARKER.encode() + b"\x01tail",
        b"Authorization: Bearer " + MARKER.encode() + b"a" * 9000,
    ],
    ids=["control-character", "oversized"],
)
async def test_malformed_authorization_is_neither_logged_nor_echoed(
    tmp_path: Path,
    header: bytes,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A header aiohttp cannot parse gets an OpenAI-shaped 400 that quotes nothing, and no log shows it."""
    caplog.set_level(logging.DEBUG)
    async with rig(tmp_path, baseline=FAST, mode="passthrough") as r:
        host, port = r.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n\r\n")
        await writer.drain()
        answer = await reader.read()
        writer.close()
        still_up = await r.get("/v1/models")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith((b"HTTP/1.1 400", b"HTTP/1.0 400"))
    assert orjson.loads(body)["error"]["code"] == "malformed_request"
    assert MARKER.encode() not in answer
    assert still_up[0] == 200
    logged = "\n".join(
        f"{rec.getMessage()} {rec.exc_text or ''} {rec.exc_info}" for rec in caplog.records
    )
    out, err = capfd.readouterr()
    for text in (logged, out, err, run_dir_text(tmp_path)):
        assert MARKER not in text
    assert "request_refused" in err


async def test_idle_timeout_starts_after_the_headers(tmp_path: Path) -> None:
    """A non-streaming answer slower than the idle timeout but within first-byte succeeds."""
    upstream = FaultServer("baseline", default="slow=0.6")
    options = {"first_byte_timeout_s": 5.0, "idle_timeout_s": 0.2}
    async with fault_rig(tmp_path, baseline=upstream, mode="passthrough", **options) as r:
        status, body = await r.post(chat())
    assert status == 200
    assert orjson.loads(body)["choices"][0]["message"]["content"] == "hello"
    (record,) = records(tmp_path)
    assert record["error_kind"] is None


async def test_idle_timeout_still_cuts_a_stalled_body(tmp_path: Path) -> None:
    """A stream that stops after its first events is cut at the idle timeout and recorded as timeout."""
    upstream = FaultServer("baseline", default="stall")
    options = {"first_byte_timeout_s": 5.0, "idle_timeout_s": 0.3}
    async with fault_rig(tmp_path, baseline=upstream, mode="passthrough", **options) as r:
        url = r.url + "/v1/chat/completions"
        async with r.session.post(url, json=chat(stream=True)) as resp:
            status = resp.status
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.read()  # the proxy ends the client's response the way it was cut
    assert status == 200  # the headers had been relayed
    (record,) = records(tmp_path)
    assert record["error_kind"] == "timeout"


@pytest.mark.parametrize(
    ("value", "streams"), [("true", True), ("True", True), (1, True), ("false", False), (0, False)]
)
async def test_stream_field_is_read_as_sglang_reads_it(
    tmp_path: Path, value: object, streams: bool
) -> None:
    """`"stream": "true"` (pydantic's reading) is relayed and measured as a stream."""
    upstream = FaultServer("baseline")
    async with fault_rig(tmp_path, baseline=upstream, mode="passthrough") as r:
        url = r.url + "/v1/chat/completions"
        async with r.session.post(url, json=chat(stream=value)) as resp:
            status, content_type = resp.status, resp.headers["Content-Type"]
            await resp.read()
    assert status == 200
    assert content_type.startswith("text/event-stream") is streams
    (record,) = records(tmp_path)
    assert (record["stream"], record["error_kind"]) == (streams, None)


@pytest.mark.parametrize("value", ["maybe", 2, [True], {"on": 1}])
async def test_unreadable_stream_field_is_400(tmp_path: Path, value: object) -> None:
    """A `stream` value SGLang would refuse is refused with 400 naming the field, sending nothing."""
    upstream = FaultServer("baseline")
    async with fault_rig(tmp_path, baseline=upstream, mode="passthrough") as r:
        status, body = await r.post(chat(stream=value), **{FAULT_HEADER: "ok"})
    assert status == 400
    assert orjson.loads(body)["error"]["message"].startswith("stream: expected a boolean")
    assert upstream.faults_seen == []
    assert not (tmp_path / "requests.jsonl").exists() or records(tmp_path) == []
