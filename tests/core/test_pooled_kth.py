"""``core/_speedups.c``'s ``pooled_kth`` finds the value ``core.statistics.cluster._Pooled._kth``'s Python
loop finds (the reference), for any weights, duplicates and infinities, and declines what it
cannot read (the Python loop then answers)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specproxy.core import speedups
from specproxy.core.statistics import cluster
from specproxy.core.statistics.cluster import _Pooled, cluster_interval

C = speedups.SPEEDUPS
needs_c = pytest.mark.skipif(C is None, reason="the C speedups are not built here")

_VALUES = st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.5, math.inf]) | st.floats(0, 100)
_GROUPS = st.lists(st.lists(_VALUES, min_size=1, max_size=12).map(sorted), min_size=1, max_size=8)


def _python(pooled: _Pooled, k: int, weights: list[int]) -> float:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(cluster, "SPEEDUPS", None)
        return pooled._kth(k, weights)


@needs_c
@settings(max_examples=400, deadline=None)
@given(groups=_GROUPS, data=st.data())
def test_every_rank_is_the_python_loops(groups: list[list[float]], data: st.DataObject) -> None:
    weights = data.draw(st.lists(st.integers(0, 3), min_size=len(groups), max_size=len(groups)))
    if not any(weights):
        weights[0] = 1
    pooled = _Pooled(groups)
    total = sum(w * len(g) for g, w in zip(groups, weights, strict=True))
    for k in range(total):
        found = C.pooled_kth(groups, weights, pooled.merged, k)
        assert found is not None
        assert found == _python(pooled, k, weights)


@needs_c
def test_what_it_cannot_read_goes_to_python() -> None:
    groups = [[1, 2, 3], [2.0, 5.0]]  # ints: the C loop reads floats only
    pooled = _Pooled(groups)
    assert C.pooled_kth(groups, [1, 2], pooled.merged, 3) is None
    assert pooled._kth(3, [1, 2]) == _python(pooled, 3, [1, 2]) == 2.0
    assert C.pooled_kth((groups[1],), [1], [2.0, 5.0], 0) is None  # not a list


@needs_c
def test_a_bootstrap_interval_is_the_same_without_c(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(4)
    num = [sorted(rng.lognormvariate(0, 0.3) for _ in range(rng.randint(5, 60))) for _ in range(12)]
    den = [sorted(rng.lognormvariate(0.1, 0.3) for _ in range(len(g))) for g in num]
    with_c = cluster_interval(num, den), cluster_interval(num)
    monkeypatch.setattr(cluster, "SPEEDUPS", None)
    assert (cluster_interval(num, den), cluster_interval(num)) == with_c
