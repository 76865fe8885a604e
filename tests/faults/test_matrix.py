"""The fault matrix: every upstream fault and bad client input x {mirror, split, passthrough, replay}.

One table (``ROWS``). Each row names a fault (the stand-in upstream's ``x-fault``, or a
client-side action), what the client must get (status, and a check on the body), and
the error class each side's record must carry. Every row asserts: the client's status
and body; that the proxy still answers a normal request afterwards; and exactly one
record per request per side that was sent to, with that error class. In mirror mode the
fault applies on both sides (the header reaches both); in split mode the request is
forced to the baseline. The replay column drives the stand-ins directly with the fault
as their default (a trace cannot set headers); client-input rows do not apply there.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
import pytest

from specproxy.core.protocol.headers import SIDE_HEADER
from specproxy.replay.config import ReplayConfig
from specproxy.replay.run import run_replay
from specproxy.testing.harness import Rig, chat, closed_port_url, records, records_when, rig
from tests.faults.upstream import FAULT_HEADER, FaultServer

MARKER = "wombat-prompt-80417"
TIMEOUTS = {"first_byte_timeout_s": 0.5, "idle_timeout_s": 0.3, "max_body_bytes": 4096}


@dataclass(frozen=True, slots=True)
class Row:
    """One fault: what is done, what the client gets, what each record says."""

    name: str
    fault: str  # the stand-in's fault, or "client:<action>" for bad client input
    stream: bool
    status: int  # the client's status (replay: the record's status, 0 for none)
    kind: str | None  # error_kind of the faulted side's record(s); "-" when nothing is recorded
    body: str = ""  # a substring the client's body must contain
    cut: bool = False  # the client's body ends without a clean end (truncated relay)
    proxy_only: bool = False


ROWS = (
    Row("ok-stream", "ok", True, 200, None, "data: [DONE]"),
    Row("ok-unary", "ok", False, 200, None, '"content":"hello"'),
    Row("refused", "refused", False, 502, "connect", "upstream_unreachable", proxy_only=True),
    Row("dropped", "drop", False, 502, "connect", "upstream_unreachable"),
    Row("no-headers", "never", False, 504, "timeout", "upstream_timeout", proxy_only=True),
    Row("slow-headers", "slow=0.4", False, 200, None, '"content":"hello"'),
    Row("http-500", "status=500", False, 500, "http_5xx", "fault 500"),
    Row("http-429", "status=429", True, 429, "http_4xx", "fault 429"),
    Row("echo-400", "echo400", False, 400, "http_4xx", MARKER),
    Row("echo-422", "echo422", False, 422, "http_4xx", MARKER),
    Row("text-500", "text500", False, 500, "http_5xx", MARKER),
    Row("truncated", "truncate", True, 200, "stream_truncated", "hello", cut=True),
    Row("stalled", "stall", True, 200, "timeout", "hello", cut=True, proxy_only=True),
    Row("stream-error", "stream_error", True, 200, "stream_error", "bad input"),
    Row("aborted", "abort", True, 200, "aborted", '"abort"'),
    Row("garbage", "garbage", True, 200, "protocol", "not sse"),
    Row("bad-json", "client:bad-json", False, 400, "-", "not valid JSON", proxy_only=True),
    Row("too-large", "client:too-large", False, 413, "-", "body_too_large", proxy_only=True),
    Row("bad-stream", "client:bad-stream", False, 400, "-", "stream: expected", proxy_only=True),
    Row("bad-auth", "client:bad-auth", False, 400, "-", "malformed_request", proxy_only=True),
    Row("disconnect", "client:disconnect", True, 200, "client_cancelled", "", proxy_only=True),
)
MODES = ("mirror", "split", "passthrough", "replay")
CASES = [
    pytest.param(mode, row, id=f"{mode}-{row.name}")
    for mode in MODES
    for row in ROWS
    if not (mode == "replay" and row.proxy_only)
]


async def _raw(rig_: Rig, head: bytes) -> tuple[int, bytes]:
    host, port = rig_.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(head)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


async def _client(r: Rig, row: Row, headers: dict[str, str]) -> tuple[int, bytes, bool]:
    """Send ``row``'s request; (status, body, whether the body was cut)."""
    url = r.url + "/v1/chat/completions"
    action = row.fault.removeprefix("client:")
    if action == "bad-json":
        async with r.session.post(url, data=b'{"model": [', headers=headers) as resp:
            return resp.status, await resp.read(), False
    if action == "too-large":
        body = chat("x" * 10_000)
        async with r.session.post(url, json=body, headers=headers) as resp:
            return resp.status, await resp.read(), False
    if action == "bad-stream":
        async with r.session.post(url, json=chat(stream="maybe"), headers=headers) as resp:
            return resp.status, await resp.read(), False
    if action == "bad-auth":
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
        status, body = await _raw(r, head + b"Authorization: Bearer k\x7f\x01\r\n\r\n{}")
        return status, body, False
    send = {**headers, FAULT_HEADER: "stall" if action == "disconnect" else row.fault}
    async with r.session.post(url, json=chat(MARKER, stream=row.stream), headers=send) as resp:
        if action == "disconnect":
            first = await resp.content.readuntil(b"\n\n")
            return resp.status, first, False  # leaving the block drops the connection
        got: list[bytes] = []
        try:
            async for data in resp.content.iter_any():
                got.append(data)  # noqa: PERF401 - chunks read before an error are kept
        except aiohttp.ClientPayloadError:
            return resp.status, b"".join(got), True
        return resp.status, b"".join(got), False


def _shadow_kind(row: Row) -> str | None:
    """What the mirror's shadow records: the same fault, except where only the primary had it."""
    if row.fault == "refused":
        return None  # only the baseline's port was closed
    if row.kind == "client_cancelled":
        return "timeout"  # the shadow runs on after the client has gone, and stalls too
    return row.kind


def _expected_sides(mode: str, row: Row) -> list[str]:
    if row.kind == "-":
        return []
    return ["baseline", "candidate"] if mode == "mirror" else ["baseline"]


@pytest.mark.parametrize(("mode", "row"), [c for c in CASES if c.values[0] != "replay"])
async def test_proxy_row(tmp_path: Path, mode: str, row: Row) -> None:
    """The proxy answers the row's fault as the table says, stays up, and records each side once."""
    base, cand = FaultServer("baseline"), FaultServer("candidate")
    async with contextlib.AsyncExitStack() as stack:
        b = (
            closed_port_url()
            if row.fault == "refused"
            else await stack.enter_async_context(base.running())
        )
        c = await stack.enter_async_context(cand.running())
        r = await stack.enter_async_context(
            rig(tmp_path, baseline=b, candidate=c, mode=mode, **TIMEOUTS)
        )
        headers = {SIDE_HEADER: "baseline"} if mode == "split" else {}
        status, body, cut = await _client(r, row, headers)
        sides = _expected_sides(mode, row)
        found = await records_when(tmp_path, len(sides))
        if row.fault != "refused":
            after, _ = await r.post(chat(), **{**headers, FAULT_HEADER: "ok"})
            assert after == 200  # the proxy is still up and serving
        assert (await r.get("/_specproxy/status"))[0] == 200
    assert status == row.status
    assert row.body in body.decode(errors="replace")
    assert cut is row.cut
    assert len({rec["request_id"] for rec in found}) == (1 if sides else 0)
    assert sorted(rec["side"] for rec in found) == sides  # one record per side, no more
    primary = [rec for rec in found if not rec["shadow"]]
    assert [rec["error_kind"] for rec in primary] == ([row.kind] if sides else [])
    for rec in found:
        if rec["shadow"]:
            assert rec["error_kind"] == _shadow_kind(row)


@pytest.mark.parametrize(("mode", "row"), [c for c in CASES if c.values[0] == "replay"])
async def test_replay_row(tmp_path: Path, mode: str, row: Row) -> None:
    """The replayer records the row's fault once per side, with the table's class and status."""
    del mode
    trace = tmp_path / "t.jsonl"
    body = chat(MARKER, stream=row.stream)
    trace.write_bytes(orjson.dumps({"t": 0, "route": "chat", "body": body}) + b"\n")
    base, cand = (
        FaultServer("baseline", default=row.fault),
        FaultServer("candidate", default=row.fault),
    )
    async with base.running() as b, cand.running() as c:
        cfg = ReplayConfig(
            traces=(str(trace),),
            baseline=b,
            candidate=c,
            mode="mirror",
            run_dir=str(tmp_path / "run"),
        )
        outcome = await run_replay(cfg)
    found = records(outcome.run_dir)
    assert sorted(rec["side"] for rec in found) == ["baseline", "candidate"]
    assert {rec["error_kind"] for rec in found} == {row.kind}
    statuses = {rec["status"] for rec in found}
    assert statuses == ({None} if row.kind == "connect" else {row.status})
    assert MARKER not in (outcome.run_dir / "requests.jsonl").read_text()
