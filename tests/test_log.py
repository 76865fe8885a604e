"""``log.LineLog``: ``file_logger``'s lines, written in batches, whole, and redacted."""

from __future__ import annotations

import io
from pathlib import Path

import orjson

from specproxy.log import LineLog, file_logger


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


FIELDS = {"side": "baseline", "fingerprint": None, "request_id": "r1", "status": 200, "e2e_us": 7}


def test_a_line_is_what_file_logger_writes(tmp_path: Path) -> None:
    """Same keys in the same order and the same values; only the time stamp differs."""
    expected_text = io.StringIO()
    file_logger(expected_text, experiment_id="e1").info("request_completed", **FIELDS)
    log = LineLog(tmp_path / "run.log", experiment_id="e1")
    log.info("request_completed", **FIELDS)
    log.close()
    expected = orjson.loads(expected_text.getvalue())
    got = orjson.loads((tmp_path / "run.log").read_bytes())
    assert list(got) == list(expected)
    assert {k: v for k, v in got.items() if k != "timestamp"} == {
        k: v for k, v in expected.items() if k != "timestamp"
    }
    stamp = got["timestamp"]
    assert stamp.endswith("Z") and stamp[10] == "T" and len(stamp) >= len("2026-01-01T00:00:00Z")


def test_lines_wait_for_the_interval_and_leave_whole(tmp_path: Path) -> None:
    clock = _Clock()
    path = tmp_path / "run.log"
    log = LineLog(path, flush_s=0.5, clock=clock, experiment_id="e1")
    log.info("request_completed", request_id="a")
    log.info("request_completed", request_id="b")
    assert path.read_bytes() == b""  # nothing written yet: within the interval
    clock.now += 0.5
    log.info("request_completed", request_id="c")  # the interval has passed: all three go
    assert [orjson.loads(x)["request_id"] for x in path.read_bytes().splitlines()] == list("abc")
    log.info("request_completed", request_id="d")
    log.flush()
    assert path.read_bytes().count(b"\n") == 4
    log.close()
    log.close()  # idempotent


def test_a_full_batch_is_written_at_once(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    log = LineLog(path, flush_s=3600, clock=_Clock())
    for i in range(2000):  # well over 64 KiB of lines
        log.info("request_completed", request_id=f"{i:08d}", padding="x" * 40)
    written = path.read_bytes()
    assert written and written.endswith(b"\n")  # batches of whole lines
    log.close()
    ids = [orjson.loads(x)["request_id"] for x in path.read_bytes().splitlines()]
    assert ids == [f"{i:08d}" for i in range(2000)]


def test_appends_beside_another_writer(tmp_path: Path) -> None:
    """Opened for appending: what another writer put in the file stays, lines stay whole."""
    path = tmp_path / "run.log"
    path.write_bytes(b'{"event":"earlier"}\n')
    log = LineLog(path)
    log.info("request_completed", request_id="a")
    with path.open("ab") as other:
        other.write(b'{"event":"other"}\n')
    log.close()
    events = [orjson.loads(x)["event"] for x in path.read_bytes().splitlines()]
    assert events == ["earlier", "other", "request_completed"]


def test_secret_keys_are_redacted(tmp_path: Path) -> None:
    log = LineLog(tmp_path / "run.log", experiment_id="e1")
    log.info("request_completed", api_key="sk-123", Prompt="hello", request_id="r")
    log.close()
    line = orjson.loads((tmp_path / "run.log").read_bytes())
    assert line["api_key"] == line["Prompt"] == "[redacted]"
    assert line["request_id"] == "r"
