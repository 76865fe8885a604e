"""Output agreement over record pairs, record by record: the oracle the column pass
(``specproxy.core.compare.column_acceptance.output_agreement``) is held equal to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specproxy.core.compare.agreement import OutputAgreement, agreement_of, first_divergence
from specproxy.core.compare.pairing import Pair


def output_agreement(pairs: Sequence[Pair], sampling: Mapping[str, Any] | None) -> OutputAgreement:
    """Agreement over the pairs where both sides completed and reported an output hash."""
    compared = matched = 0
    positions: list[float] = []
    for pair in pairs:
        b, c = pair.baseline.measurement, pair.candidate.measurement
        if not pair.both_ok or not b.output_sha256 or not c.output_sha256:
            continue
        compared += 1
        if b.output_sha256 == c.output_sha256:
            matched += 1
        elif b.output_text is not None and c.output_text is not None:
            positions.append(float(first_divergence(b.output_text, c.output_text)))
    return agreement_of(compared, matched, positions, sampling)
