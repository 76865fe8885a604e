"""The columns of several parts (run directories, or pieces of one records file read in
parallel) joined into one, as if their records were one sequence (``core.records.columns``).

Pure. The plain columns are extended at C speed; the experiment and category codes are
re-coded only where a part's tables differ from the joined ones; pairs are joined across
parts by ``(experiment_id, pair_id)``, a key's first record per side kept.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from specproxy.core.records.columns import ColumnBuilder, RecordColumns


def concat(parts: Sequence[RecordColumns]) -> RecordColumns:
    """The columns of ``parts`` one after the other, as if their records were one sequence:
    tables merged, pairs joined across parts by ``(experiment_id, pair_id)``."""
    if len(parts) == 1:
        return parts[0]
    out = RecordColumns(tuple(f for p in parts for f in p.files))
    builder = ColumnBuilder(out, frozenset())
    files = 0
    for part in parts:
        _append_part(out, builder, part, files)
        files += len(part.files)
    return out


_PLAIN = (
    "side", "warmup", "error", "mode", "acc_source", "sent", "acc_length", "e2e", "ttft",
    "tpot", "tokens", "lag", "load", "acc_steps", "block", "low", "high", "chunk_tokens",
    "prompt", "line_offset", "sha",
)  # fmt: skip


def _append_part(
    out: RecordColumns, builder: ColumnBuilder, part: RecordColumns, files: int
) -> None:
    start = len(out)
    for name in _PLAIN:
        getattr(out, name).extend(getattr(part, name))
    out.file_index.extend((f + files for f in part.file_index) if files else part.file_index)
    # A code a part shares with ``out`` (the usual case: one experiment, the same
    # categories first seen in the same order) is copied as it is, at C speed.
    exp = [builder._index(0, name) for name in part.experiment_ids]
    if exp == list(range(len(exp))):
        out.experiment.extend(part.experiment)
    else:
        out.experiment.extend(exp[e] for e in part.experiment)
    cat = [builder._index(1, name) for name in part.categories]
    if cat == list(range(len(cat))):
        out.category.extend(part.category)
    else:
        out.category.extend(cat[c] if c >= 0 else -1 for c in part.category)
    for name in ("odd_sha", "texts", "acc_histograms"):
        getattr(out, name).update({start + i: v for i, v in getattr(part, name).items()})
    for side in (0, 1):
        counts = out.itl_counts[side]
        for value, n in part.itl_counts[side].items():
            counts[value] = counts.get(value, 0) + n
        out.itl_estimated[side] += part.itl_estimated[side]
    out.duplicates += part.duplicates
    out.without_pair_id += part.without_pair_id
    _join_slots(out, part, start)


def _join_slots(out: RecordColumns, part: RecordColumns, start: int) -> None:
    """Add ``part``'s pair slots to ``out``'s: a key both hold keeps ``out``'s slot (and
    its first record per side); a new key gets the next slot, in ``part``'s order."""
    target = array("q", [-1]) * len(part.slot_base)
    for exp_id, per in part.slots.items():
        mine = out.slots.get(exp_id)
        if mine is not None:
            for pair_id, slot in per.items():
                target[slot] = mine.get(pair_id, -1)
    for slot, (b, c) in enumerate(zip(part.slot_base, part.slot_cand, strict=True)):
        into = target[slot]
        if into < 0:
            into = target[slot] = len(out.slot_base)
            out.slot_base.append(-1)
            out.slot_cand.append(-1)
        for column, index in ((out.slot_base, b), (out.slot_cand, c)):
            if index >= 0 and column[into] >= 0:
                out.duplicates += 1
            elif index >= 0:
                column[into] = start + index
    for exp_id, per in part.slots.items():
        mine = out.slots.setdefault(exp_id, {})
        for pair_id, slot in per.items():
            mine.setdefault(pair_id, target[slot])
