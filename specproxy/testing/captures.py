"""Readers for the real captures in ``tests/fixtures`` (raw HTTP and llama.cpp files)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from specproxy.core.measurement.measure import ResponseMeter
from specproxy.core.protocol.sse import SseEvent
from specproxy.core.records.model import Measurement
from specproxy.testing import REPO

FIXTURES = REPO / "tests" / "fixtures"
SGLANG = FIXTURES / "sglang-0.5.16"
LLAMACPP = FIXTURES / "llamacpp"
SGLANG_SERVERS = [
    "run_a_init0.1/base",
    "run_a_init0.1/sa_copy",
    "run_a_init0.1/sa_small",
    "run_a_init0.1/ngram",
    "run_b_attn_off/base_b",
    "run_b_attn_off/sa_copy_b",
    "run_b_attn_off/ngram_b",
    "run_c_nextn/base_c",
    "run_c_nextn/nextn_c",
]
LLAMACPP_CONFIGS = [
    "tiny/baseline",
    "tiny/spec-same",
    "tiny/spec-small",
    "tiny/spec-noisy",
    "big/baseline",
    "big/spec-big",
    "ngram/spec-ngram",
]


@dataclass(frozen=True, slots=True)
class HttpCapture:
    """One raw HTTP/1.1 response: status, headers, de-chunked body, and the chunk map.

    ``spans`` lists, for each body chunk, ``(raw_start, raw_end, body_start)``: the chunk's
    payload bytes ``raw[raw_start:raw_end]`` are ``body[body_start:...]``.
    """

    raw: bytes
    status: int
    headers: dict[str, str]
    body: bytes
    header_len: int
    spans: tuple[tuple[int, int, int], ...]

    def body_bytes_before(self, raw_offset: int) -> int:
        """How many de-chunked body bytes had arrived once ``raw_offset`` raw bytes had."""
        got = 0
        for start, end, body_start in self.spans:
            if raw_offset <= start:
                break
            got = body_start + min(raw_offset, end) - start
        return got


def parse_http(raw: bytes) -> HttpCapture:
    """Parse a raw response (status line, headers, chunked or Content-Length body)."""
    head_end = raw.index(b"\r\n\r\n") + 4
    lines = raw[: head_end - 4].decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() != "chunked":
        body = raw[head_end:]
        return HttpCapture(raw, status, headers, body, head_end, ((head_end, len(raw), 0),))
    spans: list[tuple[int, int, int]] = []
    parts: list[bytes] = []
    pos, size_so_far = head_end, 0
    while True:
        line_end = raw.index(b"\r\n", pos)
        size = int(raw[pos:line_end].split(b";")[0], 16)
        start = line_end + 2
        if size == 0:
            break
        spans.append((start, start + size, size_so_far))
        parts.append(raw[start : start + size])
        size_so_far += size
        assert raw[start + size : start + size + 2] == b"\r\n", "bad chunk trailer"
        pos = start + size + 2
    return HttpCapture(raw, status, headers, b"".join(parts), head_end, tuple(spans))


def sglang_index(server: str) -> list[dict[str, Any]]:
    """The capture index of one SGLang server folder."""
    index: list[dict[str, Any]] = json.loads((SGLANG / server / "index.json").read_text())
    return index


def sglang_exchange(server: str, name: str) -> tuple[dict[str, Any], HttpCapture]:
    """The index entry and parsed raw response of exchange ``name`` (e.g. ``generate_stream``)."""
    for entry in sglang_index(server):
        if entry["name"] == name:
            raw = (SGLANG / server / entry["file"]).read_bytes()
            return entry, parse_http(raw)
    raise KeyError(name)


def replay_sglang(
    meter: ResponseMeter, entry: dict[str, Any], cap: HttpCapture
) -> tuple[Measurement, list[SseEvent]]:
    """Feed a capture's body to ``meter`` split at its recorded socket reads and times."""
    events: list[SseEvent] = []
    timings = entry["recv_timings"]
    meter.on_headers(_first_time_with(timings, cap.header_len), cap.status)
    sent = 0
    for seconds, raw_so_far, _count in timings:
        upto = cap.body_bytes_before(raw_so_far)
        if upto > sent:
            events.extend(meter.feed(round(seconds * 1_000_000), cap.body[sent:upto]))
            sent = upto
    assert sent == len(cap.body)
    end_us = round(timings[-1][0] * 1_000_000)
    return meter.finish(end_us), events


def _first_time_with(timings: list[list[float]], nbytes: int) -> int:
    for seconds, raw_so_far, _count in timings:
        if raw_so_far >= nbytes:
            return round(seconds * 1_000_000)
    raise AssertionError("headers never arrived")


def llamacpp_lines(config: str, stream: str) -> list[tuple[float, str]]:
    """``[ms since send, raw line]`` pairs of a llama.cpp stream capture."""
    data = json.loads((LLAMACPP / config / f"{stream}.sse-times.json").read_text())
    return [(float(ms), str(line)) for ms, line in data]


def replay_llamacpp(meter: ResponseMeter, config: str, stream: str) -> Measurement:
    """Feed a llama.cpp stream line by line at its recorded arrival times."""
    lines = llamacpp_lines(config, stream)
    manifest = llamacpp_manifest(config)[stream]
    meter.on_headers(round(manifest["t_headers_ms"] * 1000), manifest["status"])
    for ms, line in lines:
        meter.feed(round(ms * 1000), line.encode("utf-8"))
    return meter.finish(round(manifest["t_total_ms"] * 1000))


def llamacpp_manifest(config: str) -> dict[str, Any]:
    """The capture manifest of one llama.cpp config (by exchange name)."""
    group, name = config.split("/")
    summary = json.loads((LLAMACPP / group / "summary.json").read_text())
    manifest: dict[str, Any] = summary["configs"][name]["manifest"]
    return manifest


def data_events(body: bytes) -> Iterator[str]:
    """The data payloads of an SSE body split naively on blank lines (for cross-checks)."""
    for block in body.decode("utf-8").split("\n\n"):
        if block.startswith("data: "):
            yield block[len("data: ") :]
