"""The recorder: one flushed JSON line per record, per-side counts and histograms, run log."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from specproxy.core.measurement.histogram import parse_histogram_log
from specproxy.core.records.model import ErrorKind, Measurement, RequestRecord, Role, Route
from specproxy.errors import ConfigError
from specproxy.recording.recorder import Recorder
from specproxy.recording.rundir import new_experiment_id, new_run_dir


def _record(i: int, side: Role, *, ok: bool = True, warmup: bool = False) -> RequestRecord:
    if ok:
        m = Measurement(
            status=200,
            ttft_us=1000 + i,
            e2e_us=5000 + i,
            tpot_us=100,
            chunk_offsets_us=(1000, 1300, 1900),
            chunk_tokens=(1, 3, 2),
            completion_tokens=6,
        )
    else:
        m = Measurement(status=500, error_kind=ErrorKind.HTTP_5XX, error_message="boom")
    return RequestRecord(
        experiment_id="e1",
        request_id=f"r{i}-{side.value}",
        side=side,
        route=Route.CHAT,
        stream=True,
        backend_url="http://127.0.0.1:1",
        sent_at_unix_s=1.0,
        actual_send_us=100 + i,
        intended_send_us=90 + i,
        pair_id=f"p{i}",
        warmup=warmup,
        measurement=m,
    )


def test_records_are_appended_one_line_each_and_round_trip(tmp_path: Path) -> None:
    """Every written record is one readable JSON line equal to the record written."""
    rec = Recorder(tmp_path, experiment_id="e1")
    written = [_record(i, Role.BASELINE) for i in range(5)] + [_record(9, Role.CANDIDATE, ok=False)]
    for r in written:
        rec.write(r)
    # Readable before close: records are flushed as they are written.
    lines = (tmp_path / "requests.jsonl").read_bytes().splitlines()
    assert len(lines) == 6
    assert [RequestRecord.from_dict(orjson.loads(line)) for line in lines] == written
    rec.close()


def test_records_of_a_batch_are_written_out_together_at_its_end(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, experiment_id="e1")
    path = tmp_path / "requests.jsonl"
    with rec.batch():
        rec.write(_record(0, Role.BASELINE))
        rec.write(_record(1, Role.BASELINE))
        assert path.read_bytes() == b""  # buffered until the batch ends
    assert len(path.read_bytes().splitlines()) == 2
    rec.write(_record(2, Role.BASELINE))  # after the batch: flushed at once again
    assert len(path.read_bytes().splitlines()) == 3
    rec.close()


def test_counts_and_histograms_skip_warmup(tmp_path: Path) -> None:
    """Failures are counted by kind; warm-up records are kept on disk and counted apart, in
    no other count and in no histogram."""
    rec = Recorder(tmp_path, experiment_id="e1")
    rec.write(_record(1, Role.BASELINE))
    rec.write(_record(2, Role.BASELINE, warmup=True))
    rec.write(_record(3, Role.CANDIDATE, ok=False))
    assert rec.stats(Role.BASELINE).completed == 1
    assert rec.stats(Role.BASELINE).warmup_excluded == 1
    assert rec.stats(Role.CANDIDATE).failed_by_kind == {"http_5xx": 1}
    assert rec.histogram(Role.BASELINE, "e2e_us").count == 1
    assert rec.histogram(Role.BASELINE, "send_lag_us").count == 1
    # chunks (1000,1),(1300,3),(1900,2): per-token 100 us x3 and 300 us x2
    assert rec.histogram(Role.BASELINE, "itl_us").count == 5
    rec.close()
    _, intervals = parse_histogram_log((tmp_path / "histograms" / "baseline.hlog").read_text())
    by_tag = {iv.tag: iv.histogram for iv in intervals}
    assert by_tag["e2e_us"].count == 1
    assert by_tag["itl_us"].count == 5
    log_lines = (tmp_path / "specproxy.log").read_text().splitlines()
    assert len(log_lines) == 3
    assert orjson.loads(log_lines[0])["event"] == "request_completed"


def test_run_dir_refuses_a_directory_with_records(tmp_path: Path) -> None:
    """A directory holding records (live or rolled) is refused and left as it was; an empty one is taken."""
    empty, live, rolled = tmp_path / "empty", tmp_path / "live", tmp_path / "rolled"
    for d in (empty, live, rolled):
        d.mkdir()
    (empty / "requests.jsonl").write_text("")
    (live / "requests.jsonl").write_text("{}\n")
    (rolled / "requests-0001.jsonl").write_text("{}\n")
    assert new_run_dir(empty, "x") == empty
    for d in (live, rolled):
        with pytest.raises(ConfigError, match=f"{d}: run directory already holds request records"):
            new_run_dir(d, "x")
    assert (live / "requests.jsonl").read_text() == "{}\n"
    assert sorted(p.name for p in rolled.iterdir()) == ["requests-0001.jsonl"]


def test_experiment_ids_are_twelve_hex_digits_and_distinct() -> None:
    """new_experiment_id gives 12 hex digits, a new one each call."""
    ids = {new_experiment_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(len(i) == 12 and int(i, 16) >= 0 for i in ids)


def test_figures_say_when_percentiles_come_from_histograms(tmp_path: Path) -> None:
    """experiment.json's side figures say ``percentiles: exact`` up to the recorder's limit
    and ``histogram`` past it, with the counts exact either way."""
    rec = Recorder(tmp_path, experiment_id="e1", exact_limit=3)
    for i in range(3):
        rec.write(_record(i, Role.BASELINE))
    assert rec.figures(Role.BASELINE)["percentiles"] == "exact"
    rec.write(_record(3, Role.BASELINE))
    figures = rec.figures(Role.BASELINE)
    assert figures["percentiles"] == "histogram"
    assert (figures["completed"], figures["e2e_us"]["max"]) == (4, 5003)
    assert 5001 <= figures["e2e_us"]["p50"] <= 5001 * 1.001
    rec.close()
