"""Reading run directories, merging several into one report, and the A/A noise floor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specproxy.core.compare.pairing import Metric, find_pairs, paired_ratio
from specproxy.core.measurement.histogram import LatencyHistogram
from specproxy.core.records.model import Role
from specproxy.errors import ConfigError
from specproxy.report.build import BuildOptions, build_report
from specproxy.report.load import load_run_dir
from specproxy.report.write import render
from specproxy.testing.fabricate import experiment, make_records, side_histograms, write_run_dir

B, C = Role.BASELINE, Role.CANDIDATE


def _snap(gen: float, calls: float) -> dict[str, object]:
    text = (
        f'sglang:generation_tokens_total{{model_name="m"}} {gen}\n'
        f'sglang:spec_verify_calls_total{{model_name="m"}} {calls}\n'
    )
    return {"server_info": {}, "metrics_text": text, "t_unix_s": 0.0}


def _two_runs(tmp_path: Path) -> tuple[Path, Path, list, list]:
    r1 = make_records(n_pairs=80, true_ratio=0.8, experiment_id="exp1", seed=1, fail_cand=0.05)
    r2 = make_records(n_pairs=50, true_ratio=0.8, experiment_id="exp2", seed=2, warmup=2)
    snaps1 = {"candidate-before": _snap(100, 50), "candidate-after": _snap(1100, 450)}
    snaps2 = {"candidate-before": _snap(0, 0), "candidate-after": _snap(500, 150)}
    d1 = write_run_dir(tmp_path / "run1", r1, experiment(), snapshots=snaps1)
    d2 = write_run_dir(tmp_path / "run2", r2, experiment(), snapshots=snaps2)
    return d1, d2, r1, r2


def test_merging_two_run_dirs_equals_the_union(tmp_path: Path) -> None:
    """Two run dirs give the report of their concatenated records: counts, pairs, ratios,
    histograms (merged exactly) and server counters (summed)."""
    d1, d2, r1, r2 = _two_runs(tmp_path)
    report = build_report([load_run_dir(d1), load_run_dir(d2)])
    union = r1 + r2
    pairs = find_pairs(union).pairs
    assert report.pairing.pairs == len(pairs) == 130
    assert report.paired[0] == paired_ratio(pairs, Metric.E2E)
    base = report.side(B)
    assert base is not None and base.requests == 130 and base.warmup_excluded == 2
    assert report.experiment_ids == ("exp1", "exp2")
    for view in report.histograms:
        expected: LatencyHistogram = side_histograms(union, view.side)[view.metric]
        assert view.count == expected.count
        assert view.p99_us == expected.percentile(99.0)
        assert view.max_us == expected.max
        assert view.runs_merged == 2
    server = next(s for s in report.server_acceptance if s.side is C)
    assert (server.generation_tokens, server.verify_calls) == (1500.0, 550.0)
    assert server.window_accept_length == pytest.approx(1500 / 550)
    assert "Cross-check: per-request exact token-weighted mean" in render(report, "text")


def test_truncated_final_line_is_skipped_and_noted(tmp_path: Path) -> None:
    """A killed run's half-written last record is skipped, counted and noted; the rest is read."""
    recs = make_records(n_pairs=5)
    run = write_run_dir(tmp_path / "run", recs, experiment())
    with (run / "requests.jsonl").open("a") as fh:
        fh.write('{"schema": 1, "experiment_id": "exp')
    data = load_run_dir(run)
    assert len(data.columns) == 10
    assert data.truncated_lines == 1
    assert any("cut off" in p for p in data.problems)


def test_corrupt_line_names_file_and_line(tmp_path: Path) -> None:
    """A bad line that is not the last one is an error naming file:line."""
    run = write_run_dir(tmp_path / "run", make_records(n_pairs=2), experiment())
    lines = (run / "requests.jsonl").read_text().splitlines()
    lines[1] = json.dumps({"schema": 1, "side": "nobody"})
    (run / "requests.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=r"requests\.jsonl:2: not a request record"):
        load_run_dir(run)


def test_not_a_run_dir(tmp_path: Path) -> None:
    """A missing path or a directory without records or experiment is a clear error."""
    with pytest.raises(ConfigError, match="not a directory"):
        load_run_dir(tmp_path / "nope")
    with pytest.raises(ConfigError, match="not a run dir"):
        load_run_dir(tmp_path)
    (tmp_path / "experiment.json").write_text("[1,")
    with pytest.raises(ConfigError, match=r"experiment\.json:1: not valid JSON"):
        load_run_dir(tmp_path)


def test_unreadable_histogram_log_falls_back_to_records(tmp_path: Path) -> None:
    """A corrupt .hlog is reported and skipped; the records still make the report."""
    run = write_run_dir(tmp_path / "run", make_records(n_pairs=40), experiment())
    (run / "histograms" / "baseline.hlog").write_text("Tag=e2e_us,0,1,1,notbase64!!\n")
    data = load_run_dir(run)
    assert any("histogram log unreadable" in p for p in data.problems)
    assert (B, "e2e_us") not in data.histograms
    assert build_report([data]).pairing.pairs == 40


def test_aa_run_dir_becomes_the_noise_floor(tmp_path: Path) -> None:
    """An A/A run dir given with a comparison is not merged in: it sets the noise floor,
    which widens the margin: a 7% effect inside an A/A reach of 8%+ is no difference."""
    main = write_run_dir(
        tmp_path / "ab", make_records(n_pairs=400, true_ratio=0.93, sigma=0.1), experiment()
    )
    aa_recs = make_records(n_pairs=40, true_ratio=1.0, sigma=0.4, experiment_id="aa", seed=3)
    aa = write_run_dir(tmp_path / "aa", aa_recs, experiment(aa=True))
    alone = build_report([load_run_dir(main)])
    assert alone.verdict.label.value == "faster"
    judged = build_report([load_run_dir(main), load_run_dir(aa)])
    assert judged.noise_floor is not None
    assert judged.noise_floor.run_dirs == (str(aa),)
    assert judged.pairing.pairs == 400
    assert judged.verdict.margin == judged.noise_floor.margin > 0.07
    assert judged.verdict.label.value == "no_difference"


def test_aa_only_report_has_no_recommendation(tmp_path: Path) -> None:
    """A report over an A/A run alone is an A/A report without a recommendation."""
    aa = write_run_dir(tmp_path / "aa", make_records(n_pairs=100, seed=8), experiment(aa=True))
    report = build_report([load_run_dir(aa)], BuildOptions(resamples=500))
    assert report.aa_reason is not None
    assert report.recommendation.text is None
    assert "A/A" in report.title


def test_worker_shards_read_as_one_run(tmp_path: Path) -> None:
    """A ``serve --workers 2`` run (records, rolled records and histogram logs per worker,
    ``core.records.runfiles``) gives the report of the same records in one file: counts, pairs,
    ratios and exactly merged histograms, as one run."""
    from specproxy.core.measurement.histogram import format_histogram_log
    from specproxy.core.records.runfiles import (
        histogram_name,
        records_name,
        rolled_name,
        shard_name,
    )

    recs = make_records(n_pairs=90, true_ratio=0.8, experiment_id="exp1", seed=3, fail_cand=0.05)
    whole = write_run_dir(tmp_path / "whole", recs, experiment())
    sharded = write_run_dir(tmp_path / "sharded", [], experiment(), histograms=False)
    (sharded / "requests.jsonl").unlink()
    order = list(dict.fromkeys(r.pair_id for r in recs))
    shards: list[list] = [[], []]
    for rec in recs:  # a pair stays with the worker that served it
        shards[order.index(rec.pair_id) % 2].append(rec)
    (sharded / "histograms").mkdir()
    for worker, part in enumerate(shards):
        shard = shard_name(worker)
        half = len(part) // 2
        for name, chunk in (
            (rolled_name(1, shard), part[:half]),
            (records_name(shard), part[half:]),
        ):
            lines = "".join(json.dumps(r.to_dict()) + "\n" for r in chunk)
            (sharded / name).write_text(lines, encoding="utf-8")
        for side in Role:
            hists = list(side_histograms(part, side).items())
            text = format_histogram_log(hists, start_unix_s=0.0, end_unix_s=60.0)
            (sharded / "histograms" / histogram_name(side.value, shard)).write_text(text)
    one, split = build_report([load_run_dir(whole)]), build_report([load_run_dir(sharded)])
    assert len(load_run_dir(sharded).columns.side) == len(recs)
    assert split.pairing.pairs == one.pairing.pairs == 90
    assert split.paired == one.paired
    for side in Role:
        got, want = split.side(side), one.side(side)
        assert got is not None and want is not None
        assert (got.requests, got.failed) == (want.requests, want.failed)
    assert [
        (v.side, v.metric, v.count, v.p50_us, v.p99_us, v.max_us) for v in split.histograms
    ] == [(v.side, v.metric, v.count, v.p50_us, v.p99_us, v.max_us) for v in one.histograms]
    assert {v.runs_merged for v in split.histograms} == {1}
