"""Every interval carries the confidence it really reaches, and no format prints "95%" over
an interval that does not reach it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from specproxy.core.compare.pairing import Metric, PairedRatio
from specproxy.core.compare.verdict import VerdictLabel, decide
from specproxy.core.records.model import RequestRecord, Role, SendMode
from specproxy.core.statistics.stats import quantile_interval
from specproxy.report import fmt
from specproxy.report.write import render, report_for
from specproxy.testing.fabricate import experiment, record, write_run_dir

B, C = Role.BASELINE, Role.CANDIDATE


@pytest.mark.parametrize(("n", "level"), [(2, 0.5), (3, 0.75), (5, 0.9375), (6, 0.96875)])
def test_median_interval_states_the_level_it_reaches(n: int, level: float) -> None:
    """The median interval of n values spans all of them and reaches 1 - 2/2^n, not 95%."""
    iv = quantile_interval([float(v) for v in range(n)])
    assert (iv.low, iv.high) == (0.0, float(n - 1))
    assert iv.confidence == pytest.approx(level)


def test_an_interval_below_95_percent_is_not_printed_as_one() -> None:
    """Below 95% the cell shows the point and why, no bracket; at 95% or more, the bracket."""
    small = quantile_interval([0.9, 1.0, 1.1, 1.2, 0.8])
    assert fmt.ratio(small) == "1.000 (n=5: too few for a 95% interval)"
    big = quantile_interval([0.9, 1.0, 1.1, 1.2, 0.8, 0.95])
    assert fmt.ratio(big) == "0.975 [0.800, 1.200]"
    assert fmt.level(big) == "96.9%"


def test_verdict_needs_an_interval_that_reaches_95_percent() -> None:
    """With min_pairs lowered to 2, a 5-pair interval (93.75%) still gives no verdict."""
    ratios = [0.5, 0.52, 0.55, 0.51, 0.53]
    small = PairedRatio(Metric.E2E, quantile_interval(ratios), 5, 1.0, units=8, clean_units=8)
    v = decide(small, mode=SendMode.ALTERNATE, min_pairs=2)
    assert v.label is VerdictLabel.INCONCLUSIVE
    assert "(93.7%)" in v.reason and "does not reach 95%" in v.reason


def _records() -> list[RequestRecord]:
    """40 pairs in category "big" and 5 in "small", candidate 0.8x to 0.84x."""
    out: list[RequestRecord] = []
    for i in range(45):
        cat = "small" if i < 5 else "big"
        base = 1_000_000 + 10_000 * i
        cand = int(base * (0.8 + 0.001 * (i % 40)))
        pid, t = f"p{i}", i * 0.1
        out.append(record(B, pid, e2e_us=base, sent_at=t, category=cat))
        out.append(record(C, pid, e2e_us=cand, sent_at=t, category=cat))
    return out


def test_every_format_labels_small_groups_honestly(tmp_path: Path) -> None:
    """Text, Markdown and HTML show the 5-pair category (one segment) without an interval
    and say why, and the 40-pair one (four segments) with it; JSON says what each interval
    rests on."""
    report = report_for([write_run_dir(tmp_path / "run", _records(), experiment())])
    groups = {g.label: g for g in report.by_category}
    assert groups["small"].e2e is not None and groups["big"].e2e is not None
    small, big = groups["small"].e2e, groups["big"].e2e
    assert (small.units, big.units) == (1, 4)
    for name in ("text", "md", "html"):
        out = render(report, name)
        assert fmt.ratio(small) in out and "1 segment: too few for a 95% interval" in fmt.ratio(
            small
        )
        assert f"{small.point:.3f} [" not in out, name
        assert fmt.ratio(big) in out, name
        paired = report.paired[0].interval
        assert paired is not None and fmt.level(paired) in out, name
    doc = json.loads(render(report, "json"))
    by_cat = {g["label"]: g for g in doc["by_category"]}
    assert by_cat["small"]["e2e"]["units"] == 1 and by_cat["small"]["e2e"]["high"] is None
    assert by_cat["big"]["e2e"]["units"] == 4
    assert doc["paired"][0]["interval"]["confidence"] >= 0.95


def test_change_reads_failures_and_no_change_plainly() -> None:
    """A median on a failure reads as failed, a ratio of 1 as no change, never "inf%" or "0.0% slower"."""
    assert fmt.change(quantile_interval([1.0, 1.0, 1.0])) == "no change"
    assert (
        fmt.change(quantile_interval([1.0, math.inf, math.inf])) == "most pairs: candidate failed"
    )
    assert fmt.change(quantile_interval([0.8, 0.8, 0.8])) == "20.0% faster"
    assert fmt.ratio(quantile_interval([0.5] * 3 + [math.inf] * 5)).startswith("inf ")
