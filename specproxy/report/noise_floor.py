"""A/A runs beside a comparison: told apart from the runs compared, and made its noise floor.

Pure (takes loaded ``RunData``). A run directory is an A/A run when
``core.compare.agreement.aa_reason`` gives a reason. Given beside other run directories, the
A/A runs are not merged into the comparison: they become its **noise floor**
(``report.model.NoiseFloor``), which widens the verdict margin to their own E2E ratio's
reach (``core.compare.verdict.noise_margin``) and sets the output agreement a comparison
should be judged against (and, for scored runs, their own distribution check).
"""

from __future__ import annotations

from collections.abc import Sequence

from specproxy.core.compare import column_acceptance as acc
from specproxy.core.compare.agreement import aa_reason
from specproxy.core.compare.column_figures import PairColumns, PairSeries
from specproxy.core.compare.pairing import Metric
from specproxy.core.compare.verdict import noise_margin
from specproxy.core.records.column_concat import concat
from specproxy.report.distribution import distribution_check
from specproxy.report.load import RunData
from specproxy.report.model import NoiseFloor


def split_aa(runs: Sequence[RunData]) -> tuple[list[RunData], list[RunData]]:
    """``(main, aa)``: the runs compared and the A/A runs beside them; every run is a main
    one when all are A/A runs (an A/A report)."""
    aa = [r for r in runs if aa_reason(r.experiment) is not None]
    main = [r for r in runs if aa_reason(r.experiment) is None]
    return (main, aa) if main else (aa, [])


def noise_floor(aa_runs: Sequence[RunData], margin: float) -> NoiseFloor | None:
    """The noise floor the A/A runs ``aa_runs`` set (None without any): ``margin``, the
    verdict margin, widened to their E2E ratio's reach."""
    if not aa_runs:
        return None
    cols = concat([r.columns for r in aa_runs])
    pairs = PairColumns.of(cols)
    e2e = PairSeries.of(cols, pairs).ratio(Metric.E2E)
    sampling = aa_runs[0].experiment.get("sampling")
    scored = any(r.scoring is not None for r in aa_runs)
    return NoiseFloor(
        run_dirs=tuple(r.path for r in aa_runs),
        e2e=e2e,
        agreement=acc.output_agreement(
            cols, pairs, sampling if isinstance(sampling, dict) else None
        ),
        margin=noise_margin(margin, e2e),
        distribution=distribution_check(aa_runs, aa_runs[0].experiment, cols, None)
        if scored
        else None,
    )
