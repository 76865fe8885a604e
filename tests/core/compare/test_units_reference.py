"""``assign_units`` gives the units of the rule as first written (a key per pair, each
key's earliest send, keys in time order), for any mix of blocks, experiments and ties."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from specproxy.core.compare.units import MAX_SEGMENTS, SEGMENT_PAIRS, assign_units


def _reference(
    experiments: Sequence[str], blocks: Sequence[int], sent: Sequence[float]
) -> tuple[str, tuple[int, ...], tuple[str, ...]]:
    keys: list[tuple[str, str, int]] = []
    unblocked: dict[str, list[int]] = {}
    for i, (experiment, block) in enumerate(zip(experiments, blocks, strict=True)):
        keys.append((experiment, "b", block))
        if block < 0:
            unblocked.setdefault(experiment, []).append(i)
    for experiment, members in unblocked.items():
        members.sort(key=sent.__getitem__)
        count = max(1, min(MAX_SEGMENTS, len(members) // SEGMENT_PAIRS))
        for rank, i in enumerate(members):
            keys[i] = (experiment, "s", rank * count // len(members))
    first: dict[tuple[str, str, int], float] = {}
    for key, at in zip(keys, sent, strict=True):
        if key not in first or at < first[key]:
            first[key] = at
    order = sorted(first, key=lambda k: (first[k], k))
    index = {key: i for i, key in enumerate(order)}
    kinds = {k[1] for k in order}
    kind = "block pair" if kinds == {"b"} else "segment" if kinds == {"s"} else "unit"
    labels = tuple(f"{'block' if k[1] == 'b' else 'segment'} {k[2]} of {k[0][:12]}" for k in order)
    return kind, tuple(index[k] for k in keys), labels


_PAIR = st.tuples(
    st.sampled_from(["exp-a", "exp-b", "exp-c"]),
    st.sampled_from([-1, -1, 0, 1, 2, 7]),
    st.sampled_from([1.0, 2.0, 3.0]) | st.floats(0, 500),
)


@settings(max_examples=1500, deadline=None)
@given(pairs=st.lists(_PAIR, max_size=400), unblocked=st.booleans())
def test_the_units_are_the_rules(pairs: list[tuple[str, int, float]], unblocked: bool) -> None:
    experiments = [p[0] for p in pairs]
    blocks = [-1 if unblocked else p[1] for p in pairs]
    sent = [p[2] for p in pairs]
    units = assign_units(experiments, blocks, sent)
    assert (units.kind, units.of, units.labels) == _reference(experiments, blocks, sent)
