"""Run directory file names: one process's, each worker's, and the order they are read in."""

from __future__ import annotations

import pytest

from specproxy.core.records.runfiles import (
    histogram_files,
    histogram_name,
    log_name,
    order_record_files,
    records_name,
    rolled_glob,
    rolled_name,
    shard_name,
)


def test_one_process_keeps_the_names_it_always_had() -> None:
    """Without a shard the names are the single proxy's: requests.jsonl and its rolled files."""
    assert records_name() == "requests.jsonl"
    assert rolled_name(3) == "requests-000003.jsonl"
    assert rolled_glob() == "requests-*.jsonl"
    assert histogram_name("baseline") == "baseline.hlog"
    assert log_name() == "specproxy.log"


def test_a_worker_shard_is_in_every_name() -> None:
    """Worker 2's files carry ``w2``, and its rolled glob matches none of the single files."""
    shard = shard_name(2)
    assert shard == "w2"
    assert records_name(shard) == "requests.w2.jsonl"
    assert rolled_name(1, shard) == "requests.w2-000001.jsonl"
    assert rolled_glob(shard) == "requests.w2-*.jsonl"
    assert histogram_name("candidate", shard) == "candidate.w2.hlog"
    assert log_name(shard) == "specproxy.w2.log"
    with pytest.raises(ValueError, match="worker must be >= 0"):
        shard_name(-1)


def test_record_files_are_ordered_single_first_then_worker_by_worker_rolled_before_live() -> None:
    """Rolled files by number before the live one; workers by number (10 after 2); other
    files left out."""
    names = [
        "requests.w10.jsonl",
        "requests.w2.jsonl",
        "requests.w2-000002.jsonl",
        "requests.w2-000001.jsonl",
        "requests.jsonl",
        "requests-000001.jsonl",
        "trace.jsonl",
        "experiment.json",
        "requests.w2.jsonl.tmp",
    ]
    assert order_record_files(names) == [
        "requests-000001.jsonl",
        "requests.jsonl",
        "requests.w2-000001.jsonl",
        "requests.w2-000002.jsonl",
        "requests.w2.jsonl",
        "requests.w10.jsonl",
    ]


def test_histogram_files_of_one_side() -> None:
    """A side's logs: its single-process log, then each worker's, never the other side's."""
    names = ["candidate.w1.hlog", "baseline.w1.hlog", "baseline.w0.hlog", "baseline.hlog.tmp"]
    assert histogram_files("baseline", names) == ["baseline.w0.hlog", "baseline.w1.hlog"]
    assert histogram_files("candidate", ["candidate.hlog", *names]) == [
        "candidate.hlog",
        "candidate.w1.hlog",
    ]
