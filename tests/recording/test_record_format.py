"""The record line format: chunk gaps (schema 2) after their summary (schema 3), schema-1
lines still read, bad chunk data and summaries refused with their file and line."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from specproxy.core.records import columns
from specproxy.core.records.chunk_span import cut_chunk_arrays
from specproxy.core.records.columns import RecordColumns
from specproxy.core.records.model import (
    CHUNK_ARRAYS,
    CHUNK_SUMMARY,
    RECORD_SCHEMA_VERSION,
    Measurement,
    RequestRecord,
    Role,
    Route,
    chunk_offsets,
)
from specproxy.errors import ConfigError, ProtocolError
from specproxy.report import scan
from specproxy.report.load import load_run_dir
from specproxy.testing.fabricate import experiment, make_records, write_run_dir

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
    assert data["schema"] == RECORD_SCHEMA_VERSION == 3
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


def _chunked(
    offsets: tuple[int, ...], tokens: tuple[int, ...], choices: tuple[int, ...] = ()
) -> RequestRecord:
    m = Measurement(
        status=200,
        e2e_us=max(offsets, default=0) + 500,
        chunk_offsets_us=offsets,
        chunk_tokens=tokens,
        chunk_choices=choices,
        completion_tokens=sum(tokens),
    )
    return RequestRecord("e", "r1", Role.CANDIDATE, Route.CHAT, True, "u", 1.0, 7, m)


CHUNKED = {
    "none": _chunked((), ()),
    "one": _chunked((9_000,), (3,)),
    "many": _chunked((15_000, 27_123, 39_001, 39_001), (1, 4, 2, 3)),
    "out-of-order": _chunked((20_000, 12_000, 31_000), (1, 1, 2)),
    "choices": _chunked((10_000, 10_500, 22_000, 23_000), (1, 1, 2, 2), (0, 1, 0, 1)),
}


@pytest.mark.parametrize("rec", CHUNKED.values(), ids=list(CHUNKED))
def test_the_chunk_summary_agrees_with_the_arrays_and_they_come_last(rec: RequestRecord) -> None:
    """Schema 3: the line carries the chunk summary (count, earliest and latest offset,
    tokens) of the arrays it holds, the arrays are its last keys, and it reads back equal."""
    m = rec.measurement
    line = orjson.dumps(rec.to_dict())
    data = orjson.loads(line)
    summary = tuple(data[name] for name in CHUNK_SUMMARY)
    offsets = m.chunk_offsets_us
    assert summary == (
        len(offsets),
        min(offsets) if offsets else None,
        max(offsets) if offsets else None,
        sum(m.chunk_tokens),
    )
    assert list(data)[-3:] == list(CHUNK_ARRAYS)
    assert RequestRecord.from_dict(data) == rec


@pytest.mark.parametrize(
    ("name", "value"),
    [("chunk_count", 3), ("chunk_min_us", 15_001), ("chunk_max_us", 1), ("chunk_tokens_sum", 11)],
)
def test_a_summary_that_disagrees_with_its_arrays_is_refused(
    tmp_path: Path, name: str, value: int
) -> None:
    """A line whose chunk summary is not what its arrays give is not a record; the report
    refuses it too where its cheap check sees it (lengths and the earliest offset), and
    naming ``file:line``."""
    data = dict(CHUNKED["many"].to_dict(), **{name: value})
    with pytest.raises(ProtocolError, match="chunk summary"):
        RequestRecord.from_dict(data)
    if name in ("chunk_max_us", "chunk_tokens_sum"):
        return  # the report takes these from the summary without reading each number
    run = write_run_dir(tmp_path / "run", make_records(n_pairs=2, chunks=True), experiment())
    with (run / "requests.jsonl").open("ab") as fh:
        fh.write(orjson.dumps(data) + b"\n")
    with pytest.raises(ConfigError, match=r"requests\.jsonl:5: not a request record.*summary"):
        load_run_dir(run)


@pytest.mark.parametrize("rec", CHUNKED.values(), ids=list(CHUNKED))
def test_cutting_the_arrays_leaves_the_rest_of_the_line(rec: RequestRecord) -> None:
    """``cut_chunk_arrays`` gives the line without its arrays (the same other fields), the
    commas in them and the first gap; a line whose arrays are not last, or one cut off
    inside them, is not cut."""
    data = rec.to_dict()
    line = orjson.dumps(data) + b"\n"
    cut = cut_chunk_arrays(line)
    assert cut is not None
    rest, commas, first, choices = cut
    assert orjson.loads(rest) == {k: v for k, v in data.items() if k not in CHUNK_ARRAYS}
    assert commas == orjson.dumps([data[k] for k in CHUNK_ARRAYS]).count(b",")
    assert choices == bool(data["chunk_choices"])
    assert first == (data["chunk_gaps_us"][0] if data["chunk_gaps_us"] else -1)
    moved = {"chunk_gaps_us": data["chunk_gaps_us"], **data}
    assert cut_chunk_arrays(orjson.dumps(moved) + b"\n") is None
    assert cut_chunk_arrays(line[:-8]) is None


def test_a_run_reads_the_same_with_its_arrays_cut_or_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every column of a run (chunk spans included, with odd chunks: none, one, out of
    order, several choices) is the same whether the lines' chunk arrays are cut off and
    their summaries read, or every line is parsed in full."""
    records = make_records(n_pairs=30, chunks=True, fail_cand=0.1, warmup=2)
    run = write_run_dir(tmp_path / "run", records, experiment())
    with (run / "requests.jsonl").open("ab") as fh:
        for rec in CHUNKED.values():
            fh.write(orjson.dumps(rec.to_dict()) + b"\n")
    lines = (run / "requests.jsonl").read_bytes().splitlines(keepends=True)
    assert all(cut_chunk_arrays(line) is not None for line in lines)
    cut = load_run_dir(run).columns
    monkeypatch.setattr(scan, "cut_chunk_arrays", lambda raw: None)
    full = load_run_dir(run).columns
    for name in RecordColumns.__slots__:
        assert repr(getattr(cut, name)) == repr(getattr(full, name)), name  # NaN too
    assert list(cut.low[-5:]) == [-1, 9_000, 15_000, 12_000, 10_000]
    assert list(cut.high[-5:]) == [-1, 9_000, 39_001, 31_000, 23_000]


@pytest.mark.parametrize("batch", [3, 4096], ids=["flushed-mid-file", "flushed-at-the-end"])
def test_a_latency_that_is_not_an_integer_names_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    """Rows go into the columns in batches; a value a column cannot hold (a float E2E) is
    still refused naming the ``file:line`` of its own record, wherever its batch ends."""
    monkeypatch.setattr(columns, "BATCH", batch)
    run = write_run_dir(tmp_path / "run", make_records(n_pairs=4, chunks=True), experiment())
    lines = (run / "requests.jsonl").read_bytes().splitlines(keepends=True)
    bad = orjson.loads(lines[4])
    bad["e2e_us"] = 1.5
    lines[4] = orjson.dumps(bad) + b"\n"
    (run / "requests.jsonl").write_bytes(b"".join(lines))
    with pytest.raises(ConfigError, match=r"requests\.jsonl:5: not a request record: TypeError"):
        load_run_dir(run)
