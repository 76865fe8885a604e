"""Rolling ``requests.jsonl`` by size and by age, and reading a rolled set as one run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specproxy.core.records.model import RequestRecord
from specproxy.errors import ConfigError
from specproxy.proxy.config import ProxyConfig
from specproxy.recording.recorder import Recorder
from specproxy.recording.rundir import new_run_dir
from specproxy.report.build import BuildOptions, build_report
from specproxy.report.load import load_run_dir, record_files
from specproxy.report.model import to_jsonable
from specproxy.testing.fabricate import experiment, make_records, read_record_file, write_run_dir


class _Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _write(run: Path, records: list[RequestRecord], **kwargs: object) -> Recorder:
    recorder = Recorder(run, experiment_id="exp000000001", **kwargs)  # type: ignore[arg-type]
    for rec in records:
        recorder.write(rec)
    recorder.close()
    return recorder


def test_size_rotation_keeps_every_record_once_in_write_order(tmp_path: Path) -> None:
    """Rolled at 20 kB, the records spread over several files, each rolled file holds at
    least 20 kB, and the files read in order give back every record exactly once."""
    records = make_records(n_pairs=60, chunks=True)
    recorder = _write(tmp_path / "run", records, rotate_bytes=20_000)
    files = record_files(tmp_path / "run")
    assert recorder.rolled_files == len(files) - 1 >= 2
    assert [f.name for f in files[:2]] == ["requests-000001.jsonl", "requests-000002.jsonl"]
    assert all(f.stat().st_size >= 20_000 for f in files[:-1])
    back = [rec for f in files for rec in read_record_file(f)]
    assert back == records


def test_time_rotation_rolls_when_the_file_is_old_enough(tmp_path: Path) -> None:
    """Rolled every 10 s, a write made after the clock passed 10 s closes the live file."""
    clock = _Clock()
    records = make_records(n_pairs=3)
    recorder = Recorder(tmp_path / "run", experiment_id="e", rotate_s=10.0, clock=clock)
    recorder.write(records[0])
    recorder.write(records[1])
    assert recorder.rolled_files == 0
    clock.now = 10.0
    recorder.write(records[2])
    assert recorder.rolled_files == 1
    recorder.write(records[3])
    recorder.close()
    rolled, live = record_files(tmp_path / "run")
    assert len(read_record_file(rolled)) == 3
    assert read_record_file(live) == [records[3]]


def test_report_over_a_rolled_set_equals_the_report_over_one_file(tmp_path: Path) -> None:
    """A run rolled into several files reports the same figures as the same records in
    one ``requests.jsonl``."""
    records = make_records(n_pairs=80, chunks=True, fail_cand=0.05, warmup=2)
    whole = write_run_dir(tmp_path / "whole", records, experiment())
    rolled = tmp_path / "rolled"
    write_run_dir(rolled, [], experiment())
    (rolled / "histograms").mkdir(exist_ok=True)
    for hlog in (whole / "histograms").iterdir():
        (rolled / "histograms" / hlog.name).write_bytes(hlog.read_bytes())
    _write(rolled, records, rotate_bytes=15_000)
    assert len(record_files(rolled)) > 2
    options = BuildOptions(resamples=200)
    one = build_report([load_run_dir(whole)], options)
    many = build_report([load_run_dir(rolled)], options)
    # every figure from the records (not the paths, nor the .hlog views this test copies)
    same = dataclasses.replace(many, run_dirs=one.run_dirs, histograms=one.histograms)
    assert to_jsonable(same) == to_jsonable(one)
    assert many.plots == one.plots


def test_run_dir_with_rolled_records_is_not_reused(tmp_path: Path) -> None:
    """A run directory holding only rolled records files is refused like a full one."""
    (tmp_path / "requests-000001.jsonl").write_text("{}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="already holds"):
        new_run_dir(tmp_path, "x")


@pytest.mark.parametrize(("key", "value"), [("rotate_mb", 0), ("rotate_s", -1.0)])
def test_rotation_settings_must_be_positive(key: str, value: float) -> None:
    """A zero or negative rotation setting is refused, naming the key."""
    with pytest.raises(ValueError, match=key):
        ProxyConfig(baseline="http://127.0.0.1:1", candidate="http://127.0.0.1:2", **{key: value})


def test_rotate_mb_is_megabytes() -> None:
    """``rotate_mb`` 1.5 rolls at 1,500,000 bytes; unset, the records are never rolled."""
    urls = {"baseline": "http://127.0.0.1:1", "candidate": "http://127.0.0.1:2"}
    assert ProxyConfig(**urls, rotate_mb=1.5).rotate_bytes == 1_500_000
    assert ProxyConfig(**urls).rotate_bytes is None
