"""The report built from record columns gives, figure by figure, exactly what the record
definitions (``core.compare.pairing``, ``core.records.tally``, ``core.compare.acceptance``,
``core.compare.sides`` and ``tests/oracles/``) give over the same
records read in full: on every saved validation run (the testbed's archived runs
included), on fabricated runs with failures, warm-ups, duplicates, lost records and
alternate blocks, and on several run directories merged.

Equal means ``==`` and the same ``repr`` (so an ``int`` never becomes a ``float``).
"""

from __future__ import annotations

import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from specproxy.core.compare import acceptance as acc
from specproxy.core.compare.pairing import Metric, find_pairs, paired_ratio
from specproxy.core.records.model import ErrorKind, Measurement, RequestRecord, Role, SendMode
from specproxy.report import scan
from specproxy.report.build import BuildOptions, _max_lag_ms, build_report
from specproxy.report.build_parts import merged_histograms
from specproxy.report.load import RunData, load_run_dir, record_files
from specproxy.report.model import Report
from specproxy.testing.fabricate import experiment, make_records, read_record_file, write_run_dir
from tests.oracles import acceptance as groups
from tests.oracles import plots
from tests.oracles.agreement import output_agreement
from tests.oracles.pairing import dominant_mode, paired_ratios
from tests.oracles.pairing import unpaired_ratios as unpaired
from tests.oracles.sides import summarise_side, throughput_timeline

VALIDATION = Path(__file__).resolve().parents[2] / "docs" / "validation"
SAVED_RUNS = sorted(p.parent for p in VALIDATION.rglob("requests.jsonl"))
ARCHIVES = sorted(VALIDATION.rglob("records.tar.gz"))
OPTIONS = BuildOptions(resamples=200)


def _records(runs: Sequence[Path]) -> list[RequestRecord]:
    """Every record of ``runs`` in full, by a plain parse independent of the loader."""
    return [rec for run in runs for path in record_files(run) for rec in read_record_file(path)]


def _expected(
    records: list[RequestRecord], loaded: Sequence[RunData], options: BuildOptions
) -> dict[str, Any]:
    """Each report figure by its record definition."""
    exp = loaded[0].experiment
    pairing = find_pairs(records)
    pairs = pairing.pairs
    itl_logs = {
        side: hist
        for (side, tag), hist in merged_histograms(loaded).items()
        if tag == "itl_us" and all((side, "itl_us") in r.histograms for r in loaded)
    }
    timeline = throughput_timeline(records, options.window_s)
    sampling = exp.get("sampling")
    return {
        "sides": tuple(summarise_side(records, s, _max_lag_ms(exp)) for s in Role),
        "pairing": pairing.counts,
        "paired": paired_ratios(pairs),
        "unpaired": unpaired(records, resamples=options.resamples, seed=options.seed),
        "acceptance": tuple(acc.summarise_acceptance(records, s) for s in Role),
        "by_acceptance": groups.ratio_by_acceptance(pairs),
        "by_category": groups.ratio_by_category(pairs),
        "by_load": groups.ratio_by_load(pairs),
        "agreement": output_agreement(pairs, sampling if isinstance(sampling, dict) else None),
        "cdfs": plots.cdfs(records, itl_logs),
        "tpot_by_load": plots.tpot_by_load(records),
        "ratio_vs_acceptance": plots.ratio_vs_acceptance(pairs),
        "timeline": timeline,
        "blocks": plots.alternate_blocks(records, timeline.origin_unix_s),
        "experiment_ids": tuple(sorted({r.experiment_id for r in records})),
        "requests": tuple(sum(r.side is s for r in records) for s in Role),
        "dominant_mode": dominant_mode(records),
    }


def _actual(report: Report, loaded: Sequence[RunData]) -> dict[str, Any]:
    from specproxy.core.compare.column_figures import dominant_mode as column_mode
    from specproxy.core.records.column_concat import concat

    p = report.plots
    return {
        "sides": report.sides,
        "pairing": report.pairing,
        "paired": report.paired,
        "unpaired": report.unpaired,
        "acceptance": report.acceptance,
        "by_acceptance": report.by_acceptance,
        "by_category": report.by_category,
        "by_load": report.by_load,
        "agreement": report.agreement,
        "cdfs": p.cdfs,
        "tpot_by_load": p.tpot_by_load,
        "ratio_vs_acceptance": p.ratio_vs_acceptance,
        "timeline": p.timeline,
        "blocks": p.blocks,
        "experiment_ids": report.experiment_ids,
        "requests": tuple(
            sum(r.columns.side.count(code) for r in loaded) for code in range(len(Role))
        ),
        "dominant_mode": column_mode(concat([r.columns for r in loaded])),
    }


def _assert_same(runs: Sequence[Path], options: BuildOptions = OPTIONS) -> Report:
    loaded = [load_run_dir(run) for run in runs]
    report = build_report(loaded, options)
    expected, actual = _expected(_records(runs), loaded, options), _actual(report, loaded)
    for name, want in expected.items():
        assert actual[name] == want, name
        assert repr(actual[name]) == repr(want), name
    return report


@pytest.mark.parametrize("run_dir", SAVED_RUNS, ids=lambda p: str(p.relative_to(VALIDATION)))
@pytest.mark.parametrize("window_s", [None, 0.25])
def test_saved_validation_runs_report_the_same(run_dir: Path, window_s: float | None) -> None:
    """Every saved validation run gives each figure exactly as the record definitions do
    (a 0.25 s window makes most requests straddle a window edge, so chunks are read back)."""
    _assert_same([run_dir], BuildOptions(resamples=200, window_s=window_s))


def _unpacked(archive: Path, into: Path) -> list[Path]:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return sorted(p.parent for p in into.rglob("requests.jsonl"))


@pytest.mark.parametrize("archive", ARCHIVES, ids=lambda p: p.parent.name)
def test_archived_testbed_runs_report_the_same(archive: Path, tmp_path: Path) -> None:
    """Every run directory inside the testbed's record archives (real SGLang, proxy and
    replay runs) gives each figure exactly as the record definitions do."""
    runs = _unpacked(archive, tmp_path)
    assert runs
    for run in runs:
        _assert_same([run], BuildOptions(resamples=200, window_s=0.5))


def test_saved_validation_runs_exist() -> None:
    """The comparisons above run over real saved runs, not an empty list."""
    assert len(SAVED_RUNS) >= 4
    assert len(ARCHIVES) >= 1


@pytest.mark.parametrize("window_s", [None, 0.5])
@pytest.mark.parametrize("logs", [True, False], ids=["histogram-logs", "no-logs"])
def test_fabricated_run_with_failures_and_warmup_reports_the_same(
    tmp_path: Path, window_s: float | None, logs: bool
) -> None:
    """A fabricated mirror run with failures, warm-ups, categories, disagreeing outputs and
    chunked streams gives each figure exactly as the record definitions do, with histogram
    logs and without (per-token latencies then come from the records)."""
    records = make_records(
        n_pairs=120,
        true_ratio=0.8,
        chunks=True,
        warmup=3,
        fail_base=0.03,
        fail_cand=0.05,
        disagree=0.2,
        categories=("code", "math", ""),
    )
    run = write_run_dir(tmp_path / "run", records, experiment(), histograms=logs)
    report = _assert_same([run], BuildOptions(resamples=200, window_s=window_s))
    assert report.pairing.pairs == 120 and report.agreement.mismatched > 0


def _lines(run: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (run / "requests.jsonl").read_bytes().splitlines()]


def _rewrite(run: Path, lines: list[dict[str, Any]]) -> None:
    (run / "requests.jsonl").write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in lines))


def test_duplicates_lost_records_and_odd_fields_report_the_same(tmp_path: Path) -> None:
    """Duplicated, lost and pair-less records, shadow drops, odd output hashes, texts,
    step histograms, schema-1 offsets and alternate blocks give the same figures."""
    records = make_records(n_pairs=60, chunks=True, fail_cand=0.1, mode=SendMode.ALTERNATE)
    run = write_run_dir(tmp_path / "run", records, experiment(mode="alternate"))
    lines = _lines(run)
    lines.append(dict(lines[4], request_id="again"))  # a duplicate of a paired record
    del lines[7]  # one pair loses a record
    lines[9]["pair_id"] = None
    lines[11].update(error_kind=ErrorKind.SHADOW_DROPPED.value, status=None)
    lines[12]["output_sha256"] = "NOT-HEX"
    lines[13]["output_sha256"] = lines[12]["output_sha256"]
    lines[14]["output_sha256"] = ""
    for k, d in enumerate(lines):
        d["labels"] = {"block": str(k // 10)}
        if d.get("acceptance"):
            d["acceptance"]["histogram"] = [k % 3, 1, 2][: 1 + k % 3]
    offsets = RequestRecord.from_dict(lines[20]).measurement.chunk_offsets_us
    lines[20].pop("chunk_gaps_us")
    lines[20]["chunk_offsets_us"] = list(reversed(offsets))
    lines[20]["chunk_tokens"] = list(reversed(lines[20]["chunk_tokens"]))
    _rewrite(run, lines)
    report = _assert_same([run], BuildOptions(resamples=200, window_s=0.3))
    assert report.pairing.duplicates == 1 and report.pairing.incomplete == 2  # lost, pair-less
    assert report.plots.blocks


def test_merged_run_dirs_join_pairs_across_them(tmp_path: Path) -> None:
    """Two run directories holding halves of one experiment (pairs split between them, one
    given twice) merge into the figures of their records read as one sequence."""
    records = make_records(n_pairs=50, chunks=True, fail_base=0.05, warmup=2)
    first = write_run_dir(tmp_path / "a", records[:51], experiment())
    second = write_run_dir(tmp_path / "b", records[51:], experiment())
    other = write_run_dir(
        tmp_path / "c", make_records(n_pairs=20, experiment_id="exp000000002"), experiment()
    )
    report = _assert_same([first, second, other])
    assert report.pairing.pairs == 70 and report.pairing.incomplete == 0
    again = _assert_same([first, second, first])
    assert again.pairing.duplicates == 51 - 4  # warm-up records never pair, nor repeat


def test_noise_floor_from_columns_equals_the_record_definition(tmp_path: Path) -> None:
    """The A/A run's E2E ratio and output agreement (the noise floor) equal the record
    definitions over its records."""
    aa_records = make_records(n_pairs=40, experiment_id="exp000000009", disagree=0.1)
    aa = write_run_dir(tmp_path / "aa", aa_records, experiment(aa=True))
    main = write_run_dir(tmp_path / "main", make_records(n_pairs=40), experiment())
    report = build_report([load_run_dir(main), load_run_dir(aa)], OPTIONS)
    pairs = find_pairs(aa_records).pairs
    assert report.noise_floor is not None
    assert report.noise_floor.e2e == paired_ratio(pairs, Metric.E2E)
    assert report.noise_floor.agreement == output_agreement(pairs, {"temperature": 0})


def test_a_failed_record_without_latencies_reports_the_same(tmp_path: Path) -> None:
    """Records without E2E, tokens or chunks (a connect failure) and a one-token answer
    without TPOT take the same paths as in the record definitions."""
    records = make_records(n_pairs=8, chunks=True)
    bare = Measurement(error_kind=ErrorKind.CONNECT)
    records[3] = RequestRecord(**{**_fields(records[3]), "measurement": bare})
    run = write_run_dir(tmp_path / "run", records, experiment(mode="unknown"))
    report = _assert_same([run])
    assert report.sides[1].failed == 1


def _fields(rec: RequestRecord) -> dict[str, Any]:
    return {name: getattr(rec, name) for name in rec.__dataclass_fields__}


def test_a_run_read_in_parallel_byte_ranges_reports_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read as byte ranges in three processes (as a long run is), a rolled run whose pairs
    and files are cut between ranges gives each figure exactly as the record definitions
    do, and the same columns as one sequential pass."""
    records = make_records(n_pairs=90, chunks=True, fail_cand=0.05, warmup=2, disagree=0.1)
    run = write_run_dir(tmp_path / "run", records[:101], experiment())
    live = run / "requests.jsonl"
    live.rename(run / "requests-000001.jsonl")
    write_run_dir(tmp_path / "rest", records[101:], None, histograms=False)
    (tmp_path / "rest" / "requests.jsonl").rename(live)
    sequential = load_run_dir(run).columns
    monkeypatch.setattr(scan, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(scan, "workers", lambda: 3)
    ranges = scan.split_ranges(record_files(run), 3)
    assert len(ranges) >= 3
    assert len(scan.balance(ranges, 3)) == 3
    report = _assert_same([run], BuildOptions(resamples=200, window_s=0.5))
    parallel = load_run_dir(run).columns
    assert report.pairing.pairs == 90
    for name in ("side", "e2e", "low", "high", "line_offset", "sha", "slot_base", "slot_cand"):
        assert getattr(parallel, name) == getattr(sequential, name), name
