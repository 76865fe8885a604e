"""``runtime.steady_state``: long-lived objects frozen, fewer young collections, both undone."""

from __future__ import annotations

import gc

from specproxy.runtime import YOUNG_GC_THRESHOLD, steady_state


def test_steady_state_freezes_and_raises_the_young_threshold_then_undoes_both() -> None:
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    kept = [[i] for i in range(1000)]  # tracked containers that live through the block
    with steady_state():
        assert gc.get_freeze_count() >= frozen_before + len(kept)
        assert gc.get_threshold() == (YOUNG_GC_THRESHOLD, *before[1:])
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_steady_state_undoes_on_an_error() -> None:
    before = gc.get_threshold()
    try:
        with steady_state():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
