"""The record line format: chunk gaps (schema 2), schema-1 lines still read, bad chunk data
refused with its file and line."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from specproxy.core.model import (
    RECORD_SCHEMA_VERSION,
    Measurement,
    RequestRecord,
    Role,
    Route,
    chunk_offsets,
)
from specproxy.errors import ConfigError, ProtocolError
from specproxy.report.load import load_run_dir
from tests.report.fabricate import experiment, make_records, write_run_dir

VALIDATION = Path(__file__).resolve().parents[2] / "docs" / "validation"


def _record(offsets: tuple[int, ...]) -> RequestRecord:
    m = Measurement(
        status=200,
        ttft_us=offsets[0] if offsets else None,
        e2e_us=(offsets[-1] if offsets else 0) + 500,
        chunk_offsets_us=offsets,
        chunk_tokens=(1,) * len(offsets),
        completion_tokens=len(offsets),
    )
    return RequestRecord("e", "r1", Role.CANDIDATE, Route.CHAT, True, "u", 1.0, 7, m)


def test_chunk_offsets_are_stored_as_gaps_and_read_back_exactly() -> None:
    """A record's line holds ``chunk_gaps_us`` (first offset, then differences) and no
    absolute offsets, and reads back equal to the record written."""
    rec = _record((15_000, 27_123, 39_001, 39_001, 52_777))
    line = orjson.dumps(rec.to_dict())
    data = orjson.loads(line)
    assert data["schema"] == RECORD_SCHEMA_VERSION == 2
    assert data["chunk_gaps_us"] == [15_000, 12_123, 11_878, 0, 13_776]
    assert "chunk_offsets_us" not in data
    assert RequestRecord.from_dict(data) == rec


def test_gaps_make_long_answers_shorter_on_disk() -> None:
    """For a 1,000-event answer 20 ms apart the gap encoding is smaller than the absolute
    offsets it replaces."""
    offsets = tuple(15_000 + 20_000 * i for i in range(1000))
    data = _record(offsets).to_dict()
    gaps_bytes = len(orjson.dumps(data["chunk_gaps_us"]))
    assert gaps_bytes < len(orjson.dumps(list(offsets))) * 0.8


@pytest.mark.parametrize(
    "path", sorted(VALIDATION.rglob("requests.jsonl"))[:2], ids=lambda p: p.parent.name
)
def test_schema_1_lines_read_and_survive_a_rewrite(path: Path) -> None:
    """Saved schema-1 lines (absolute offsets) read as records whose schema-2 form reads
    back equal, chunk offsets included."""
    first = orjson.loads(path.read_bytes().split(b"\n", 1)[0])
    assert first["schema"] == 1 and "chunk_offsets_us" in first
    rec = RequestRecord.from_dict(first)
    assert rec.measurement.chunk_offsets_us == tuple(first["chunk_offsets_us"])
    assert RequestRecord.from_dict(orjson.loads(orjson.dumps(rec.to_dict()))) == rec


@pytest.mark.parametrize("gaps", [[1.5, 2], ["1", 2], 7])
def test_bad_chunk_gaps_are_refused(gaps: object) -> None:
    """Gaps that are not a list of integers are not a record."""
    data = _record((1, 2)).to_dict()
    data["chunk_gaps_us"] = gaps
    with pytest.raises((TypeError, ValueError)):
        chunk_offsets(data)
    with pytest.raises(ProtocolError):
        RequestRecord.from_dict(data)


@pytest.mark.parametrize("logs", [False, True], ids=["records-keep-chunks", "spans"])
def test_bad_chunk_gaps_in_a_run_name_the_file_and_line(tmp_path: Path, logs: bool) -> None:
    """A streamed load names ``requests.jsonl:LINE`` of a record with bad chunk gaps, whether
    the records keep their chunks (no histogram logs) or are reduced to spans."""
    run = write_run_dir(
        tmp_path / "run", make_records(n_pairs=2, chunks=True), experiment(), histograms=logs
    )
    bad = dict(_record((1, 2)).to_dict(), chunk_gaps_us=[1.5, 2.5])
    with (run / "requests.jsonl").open("ab") as fh:
        fh.write(orjson.dumps(bad) + b"\n")
    with pytest.raises(ConfigError, match=r"requests\.jsonl:5: not a request record"):
        load_run_dir(run)
