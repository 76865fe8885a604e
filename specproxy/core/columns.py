"""Request records as columns: only the fields the report's figures read, in compact arrays.

Pure. ``ColumnBuilder`` takes each record's dict as its line was parsed and appends the
fields the figures need to ``array`` columns (about 150 bytes a record, whatever its size),
refusing what ``RequestRecord.from_dict`` refuses (and, stricter, a latency or token count
that is not an integer). The figures over these columns are in ``core.compare.column_figures``
and ``core.compare.column_acceptance``; ``tests/report/test_scale_equivalence.py`` holds
them equal to the record definitions. Columns are read-only once their pass is done.

Encoding: a missing integer is ``NULL``; a missing accept length is NaN (JSON has none);
a missing code (error kind, mode, acceptance source, category) is -1. Per record the
chunk arrays are reduced to their **span** (earliest and latest chunk offset and the sum
of chunk tokens; ``NO_CHUNKS`` when there are none) with where the line starts, so that a
caller with file access can read the few it needs again (``report.timeline``).

Most of a line's bytes are its chunk arrays, and parsing them (a Python int per entry)
was most of the cost of a line. A schema-3 line ends in them, after their summary
(``core.model.CHUNK_SUMMARY``), so ``cut_chunk_arrays`` cuts their bytes off before the
line is parsed and the span comes from the summary, checked against the arrays by two
C-level byte scans: their lengths (commas) and the earliest offset (the first gap). A
record whose per-token latencies are counted here (below), an older line and one whose
summary does not fit its arrays are parsed in full; every number of the arrays is then
read, and a summary that disagrees with them refuses the record. Without it, a byte scan
of the raw line's ``chunk_gaps_us`` for a ``-`` stands in for ``min(gaps) >= 0``.

Pairs are joined as the records arrive (``(experiment_id, pair_id)`` to a slot in
first-seen order, ``core.compare.pairing.find_pairs``'s rule): a slot keeps the index of
each side's first record; a second one on a filled side is a duplicate. Output hashes are
kept as 32 raw bytes (anything but a lowercase 64-hex ``output_sha256`` goes in ``odd_sha``).
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from specproxy.core.model import (
    CHUNK_SUMMARY,
    AcceptanceSource,
    ErrorKind,
    Role,
    Route,
    SendMode,
    chunk_offsets,
)
from specproxy.core.timing import token_latencies_us

NULL = -(1 << 63)
NO_CHUNKS = -1
SIDES = (Role.BASELINE, Role.CANDIDATE)
ERRORS = tuple(ErrorKind)
MODES = tuple(SendMode)
SOURCES = tuple(AcceptanceSource)
SHA_BYTES = 32
_NO_SHA = bytes(SHA_BYTES)

_SIDE = {s.value: i for i, s in enumerate(SIDES)}
_ERROR = {e.value: i for i, e in enumerate(ERRORS)}
_MODE = {m.value: i for i, m in enumerate(MODES)}
_SOURCE = {s.value: i for i, s in enumerate(SOURCES)}
_ROUTES = frozenset(r.value for r in Route)
_REQUIRED_NAMES = (
    "experiment_id", "request_id", "side", "route", "stream", "backend_url", "sent_at_unix_s",
    "actual_send_us",
)  # fmt: skip
_REQUIRED = itemgetter(*_REQUIRED_NAMES)
_DEFAULTS: dict[str, Any] = {
    "warmup": False, "error_kind": None, "mode": None, "category": None, "e2e_us": None,
    "ttft_us": None, "tpot_us": None, "headers_us": None, "completion_tokens": None,
    "intended_send_us": None, "in_flight_at_send": 0, "acceptance": None, "labels": None,
    "pair_id": None, "output_sha256": None, "output_text": None,
    "chunk_tokens_estimated": False, "prompt_tokens": None,
}  # fmt: skip
_FIELDS = itemgetter(*_REQUIRED_NAMES, *_DEFAULTS)
_SUMMARY = itemgetter(*CHUNK_SUMMARY)
Span = tuple[int, int, int, int]
"""A record's chunks: earliest and latest offset (``NO_CHUNKS`` without), count, tokens."""
_ROW = (
    "side", "warmup", "error", "mode", "experiment", "category", "sent", "e2e", "ttft", "tpot",
    "tokens", "lag", "load", "acc_source", "acc_length", "acc_steps", "block", "low", "high",
    "chunk_tokens", "prompt", "file_index", "line_offset",
)  # fmt: skip
"""The columns one record adds a value to, in the order of ``ColumnBuilder``'s rows."""
BATCH = 4096
"""Records held as rows before their values go into the columns (``ColumnBuilder.flush``)."""

_GAPS_KEY = b',"chunk_gaps_us":['
_ARRAY_KEYS = frozenset(("chunk_offsets_us", "chunk_gaps_us", "chunk_tokens", "chunk_choices"))
_NO_CHOICES = b'],"chunk_choices":['
Cut = tuple[bytes, int, int, bool]
"""What ``cut_chunk_arrays`` gives: the line without its chunk arrays, the commas in
them, the first gap (-1 without any), whether there are chunk choices."""


def cut_chunk_arrays(raw: bytes) -> Cut | None:
    """A line ``raw`` that ends in its chunk arrays as schema 3 writes them
    (``CHUNK_ARRAYS``, last, in that order): ``(the line without them, the commas in them,
    the first gap, whether there are choices)``, which ``ColumnBuilder.add`` checks against the record's chunk
    summary (lengths, by the commas; the earliest offset). None for any other line (it is
    read in full). Two C-level scans of the arrays' bytes, no number parsed but the first."""
    at = raw.rfind(_GAPS_KEY)
    if at < 0:
        return None
    end = len(raw) - (3 if raw.endswith(b"]}\n") else 2)
    if raw[end : end + 2] != b"]}":
        return None
    gaps_at = at + len(_GAPS_KEY)
    first = -1
    if raw[gaps_at] != 93:  # not "]": some gaps
        number = raw[gaps_at : raw.find(b",", gaps_at, end)]  # "]" ends it when it is alone
        try:
            first = int(number[:-1] if number.endswith(b"]") else number)
        except ValueError:
            return None
    choices = raw[end - len(_NO_CHOICES) : end] != _NO_CHOICES
    return raw[:at] + b"}", raw.count(b",", gaps_at, end), first, choices


def _check(route: Any, request_id: Any, load: Any, *latencies: Any) -> None:
    """What ``RequestRecord`` refuses among the fields the columns do not keep or code."""
    if route not in _ROUTES:
        raise ValueError(f"{route!r} is not a valid route")
    if not request_id:
        raise ValueError("request_id must not be empty")
    if load < 0:
        raise ValueError("in_flight_at_send must be >= 0")
    for name, value in zip(("e2e_us", "ttft_us", "tpot_us", "headers_us"), latencies, strict=True):
        if value is not None and value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def _block(labels: Any) -> int:
    """The numeric ``block`` label (alternate mode), else ``NULL``."""
    block = dict(labels).get("block")
    return int(block) if block is not None and block.isdigit() else NULL


class RecordColumns:
    """The columns of one or more run directories' records, in record order (module doc).

    Per record ``i``: ``side`` (index into ``SIDES``), ``warmup``, ``error`` (index into
    ``ERRORS``, -1 completed), ``experiment`` (into ``experiment_ids``), ``mode``,
    ``sent`` (Unix s), ``e2e``/``ttft``/``tpot``/``tokens`` (completion tokens), ``lag``
    (send lag), ``load`` (in flight at send), ``category`` (into ``categories``),
    ``acc_length``/``acc_source``/``acc_steps`` (verify_ct), ``prompt`` (prompt tokens),
    ``block`` (the numeric ``block`` label), the chunk span ``low``/``high``/``chunk_tokens``
    and its line (``file_index`` into ``files``, ``line_offset``). Per slot:
    ``slot_base``/``slot_cand`` (record index or -1).
    """

    __slots__ = (
        "acc_histograms", "acc_length", "acc_source", "acc_steps", "block", "categories", "category",
        "chunk_tokens", "duplicates", "e2e", "error", "experiment", "experiment_ids",
        "file_index", "files", "high", "itl_counts", "itl_estimated", "lag", "line_offset",
        "load", "low", "mode", "odd_sha", "prompt", "sent", "sha", "side", "slot_base", "slot_cand",
        "slots", "texts", "tokens", "tpot", "ttft", "warmup", "without_pair_id",
    )  # fmt: skip

    def __init__(self, files: Sequence[str] = ()) -> None:
        self.files = tuple(files)
        self.side, self.warmup, self.error, self.mode = (array("b") for _ in range(4))
        self.acc_source = array("b")
        self.experiment, self.category = array("i"), array("i")
        self.sent, self.acc_length = array("d"), array("d")
        self.e2e, self.ttft, self.tpot, self.tokens = (array("q") for _ in range(4))
        self.lag, self.load, self.acc_steps, self.block = (array("q") for _ in range(4))
        self.low, self.high, self.chunk_tokens, self.prompt = (array("q") for _ in range(4))
        self.file_index, self.line_offset = array("H"), array("q")
        self.sha = bytearray()
        self.odd_sha: dict[int, str] = {}
        self.texts: dict[int, str] = {}
        self.acc_histograms: dict[int, tuple[int, ...]] = {}
        self.experiment_ids: list[str] = []
        self.categories: list[str] = []
        self.slots: dict[str, dict[Any, int]] = {}
        self.slot_base, self.slot_cand = array("q"), array("q")
        self.duplicates = self.without_pair_id = 0
        self.itl_counts: tuple[dict[int, int], dict[int, int]] = ({}, {})
        self.itl_estimated = [0, 0]

    def __len__(self) -> int:
        return len(self.side)

    def sha_of(self, i: int) -> str | bytes | None:
        """Record ``i``'s output hash (raw bytes, or the odd string); None when it had none."""
        odd = self.odd_sha.get(i)
        if odd is not None:
            return odd
        raw = bytes(self.sha[i * SHA_BYTES : (i + 1) * SHA_BYTES])
        return None if raw == _NO_SHA else raw

    def pairs(self) -> tuple[array[int], array[int]]:
        """Record indices ``(baseline, candidate)`` of the complete pairs, in slot order."""
        base, cand = array("q"), array("q")
        for b, c in zip(self.slot_base, self.slot_cand, strict=True):
            if b >= 0 and c >= 0:
                base.append(b)
                cand.append(c)
        return base, cand

    def missing(self) -> tuple[int, int]:
        """Slots without a baseline record, and slots without a candidate record."""
        no_base = self.slot_base.count(-1)
        no_cand = sum(b >= 0 and c < 0 for b, c in zip(self.slot_base, self.slot_cand, strict=True))
        return no_base, no_cand


def _code(table: dict[str, int], value: Any, what: str) -> int:
    code = table.get(value) if type(value) is str else None
    if code is None:
        raise ValueError(f"{value!r} is not a valid {what}")
    return code


def _may_have_negative_gap(gaps: Any, raw: bytes) -> bool:
    """False only when ``raw`` shows no minus sign in ``chunk_gaps_us`` (module docstring)."""
    if not (gaps and raw):
        return True
    end = raw.rfind(b'"chunk_gaps_us":')
    return end < 0 or raw.find(b"-", end, raw.find(b"]", end)) >= 0


class RecordError(ValueError):
    """A record refused when its batch went into the columns (``ColumnBuilder.flush``):
    ``offset`` is where its line starts in file ``file_index``."""

    def __init__(self, file_index: int, offset: int, problem: Exception) -> None:
        super().__init__(repr(problem))
        self.file_index, self.offset, self.problem = file_index, offset, problem


def _summary_span(data: dict[str, Any], cut: Cut) -> Span | None:
    """The record's chunk span from its chunk summary, checked against what
    ``cut_chunk_arrays`` saw of the arrays: the commas of ``count`` gaps and as many
    tokens (and choices, when there are any) and the first gap, the earliest offset unless a gap
    is negative. None when the line has no summary, the arrays were not all cut off, or
    the summary does not fit them: the line is then read in full, every number checked."""
    try:
        count, low, high, total = _SUMMARY(data)
    except KeyError:
        return None
    if not data.keys().isdisjoint(_ARRAY_KEYS):  # four lookups, not a walk of the keys
        return None
    _, commas, first, choices = cut
    if not count:
        fits = count == 0 and first < 0 and not choices and commas == 2
        fits = fits and low is None and high is None and total == 0
        return (NO_CHUNKS, NO_CHUNKS, 0, 0) if fits else None
    if type(count) is not int or commas != (3 * count - 1 if choices else 2 * count):
        return None
    if type(low) is not int or type(high) is not int or type(total) is not int:
        return None
    if low != first or high < low:
        return None
    return low, high, count, total


class ColumnBuilder:
    """Appends record dicts to ``columns``. Each record becomes a row of its values
    (``_ROW``), and every ``BATCH`` rows go into the columns at once: ``flush`` puts the
    rest in, and the columns are whole only after it. Per-token latencies are counted from
    the records of ``keep_sides`` (``SIDES`` indices of the sides without an ``itl_us`` log)
    and from records with estimated tokens per chunk (the ITL figure says how many samples
    those are)."""

    __slots__ = ("_count", "_experiments", "_keep", "_rows", "_table_index", "columns")

    def __init__(self, columns: RecordColumns, keep_sides: frozenset[int]) -> None:
        self.columns = columns
        self._keep = keep_sides
        self._table_index: tuple[dict[str, int], dict[str, int]] = (
            {v: i for i, v in enumerate(columns.experiment_ids)},
            {v: i for i, v in enumerate(columns.categories)},
        )
        self._experiments = self._table_index[0]
        self._rows: list[tuple[Any, ...]] = []
        self._count = len(columns)

    def _index(self, which: int, value: str) -> int:
        table = self._table_index[which]
        code = table.get(value)
        if code is None:
            names = self.columns.experiment_ids if which == 0 else self.columns.categories
            code = table[value] = len(names)
            names.append(value)
        return code

    def add(
        self,
        data: dict[str, Any],
        file_index: int,
        line_offset: int,
        raw: bytes = b"",
        cut: Cut | None = None,
    ) -> bool:
        """Append one record dict, parsed from the line ``raw`` when given (a byte scan of it
        then says whether any chunk gap is negative). With ``cut`` (``cut_chunk_arrays`` of
        ``raw``) ``data`` was parsed without the chunk arrays, and their summary stands for
        them; False, with nothing appended, when it cannot (no summary or one that does not
        fit, or per-token latencies to count): give the record parsed in full then.
        ValueError, TypeError or KeyError naming what is wrong."""
        try:
            fields = _FIELDS(data)
        except KeyError:
            _REQUIRED(data)
            fields = _FIELDS({**_DEFAULTS, **data})
        (
            exp_id, request_id, side_name, route, _, _, sent, actual, warmup, error_name,
            mode_name, category, e2e, ttft, tpot, headers, tokens, intended, load, acc, labels,
            pair_id, sha, text, estimated, prompt,
        ) = fields  # fmt: skip
        side = _SIDE.get(side_name) if type(side_name) is str else None
        if side is None:
            raise ValueError(f"{side_name!r} is not a valid side")
        if (
            route not in _ROUTES or not request_id or load < 0
            or (e2e is not None and e2e < 0) or (ttft is not None and ttft < 0)
            or (tpot is not None and tpot < 0) or (headers is not None and headers < 0)
        ):  # fmt: skip
            _check(route, request_id, load, e2e, ttft, tpot, headers)  # raises, naming it
        error = -1 if error_name is None else _code(_ERROR, error_name, "error kind")
        live_ok = error < 0 and not warmup
        if cut is None:
            span = self._chunks(data, raw, side, live_ok, bool(estimated))
        else:
            summary = _summary_span(data, cut)
            if summary is None or (live_ok and summary[2] and (estimated or side in self._keep)):
                return False
            span = summary
        i = self._count
        self._count = i + 1
        code = self._experiments.get(exp_id)
        if acc is None:
            acc_source, acc_length, acc_steps = -1, math.nan, NULL
        else:
            acc_source, acc_length, acc_steps = self._acceptance(acc, i)
        self._output(sha, text, i)
        self._rows.append((
            side, bool(warmup), error,
            -1 if mode_name is None else _code(_MODE, mode_name, "send mode"),
            self._index(0, exp_id) if code is None else code,
            self._index(1, category) if category else -1,
            sent,
            NULL if e2e is None else e2e,
            NULL if ttft is None else ttft,
            NULL if tpot is None else tpot,
            NULL if tokens is None else tokens,
            NULL if intended is None else actual - intended,
            load, acc_source, acc_length, acc_steps,
            NULL if not labels else _block(labels),
            span[0], span[1], span[3], NULL if prompt is None else prompt, file_index, line_offset,
        ))  # fmt: skip
        if warmup:
            pass
        elif pair_id is None:
            self.columns.without_pair_id += 1
        else:
            self._join(exp_id, pair_id, side, i)
        if len(self._rows) >= BATCH:
            self.flush()
        return True

    def flush(self) -> None:
        """Put the rows held into the columns; a RecordError naming the first record whose
        value a column cannot hold (a latency that is not an integer, say)."""
        rows, self._rows = self._rows, []
        if not rows:
            return
        c = self.columns
        columns = [getattr(c, name) for name in _ROW]
        try:
            for column, values in zip(columns, zip(*rows, strict=True), strict=True):
                column.fromlist(list(values))  # one resize: twice extend's speed
        except (TypeError, OverflowError):
            for row in rows:
                try:
                    for column, value in zip(columns, row, strict=True):
                        array(column.typecode, (value,))
                except (TypeError, OverflowError) as exc:
                    raise RecordError(row[-2], row[-1], exc) from exc
            raise

    def _acceptance(self, acc: Any, i: int) -> tuple[int, float, int]:
        source = _code(_SOURCE, acc["source"], "acceptance source")
        length = acc.get("accept_length")
        if length is not None and length < 0:
            raise ValueError("accept_length must be >= 0")
        steps = acc.get("verify_ct")
        if steps is not None and steps < 0:
            raise ValueError("verify_ct must be >= 0")
        hist = acc.get("histogram")
        if hist:
            self.columns.acc_histograms[i] = tuple(hist)
        return source, math.nan if length is None else length, NULL if steps is None else steps

    def _output(self, sha: Any, text: Any, i: int) -> None:
        c = self.columns
        raw = _NO_SHA
        if sha:
            try:
                raw = bytes.fromhex(sha)
            except (TypeError, ValueError):
                raw = b""
            if len(raw) != SHA_BYTES or raw.hex() != sha:
                c.odd_sha[i] = sha
                raw = _NO_SHA
        c.sha += raw
        if text is not None:
            c.texts[i] = text

    def _chunks(
        self, data: dict[str, Any], raw: bytes, side: int, live_ok: bool, estimated: bool
    ) -> Span:
        """The span of the record's chunks read from its arrays (checked against its chunk
        summary when it has one); per-token latencies counted where asked."""
        c = self.columns
        gaps = data.get("chunk_gaps_us")
        tokens = data.get("chunk_tokens") or ()
        choices = data.get("chunk_choices") or ()
        if gaps:
            high = sum(gaps) if isinstance(gaps, list) else None
            if type(high) is not int:
                raise ValueError("chunk_gaps_us must be a list of integers")
            if not _may_have_negative_gap(gaps, raw) or min(gaps) >= 0:
                low = gaps[0]
            else:
                offsets = list(itertools.accumulate(gaps))
                low, high = min(offsets), max(offsets)
            count = len(gaps)
        else:
            offsets = data.get("chunk_offsets_us") or []
            count = len(offsets)
            low, high = (min(offsets), max(offsets)) if offsets else (NO_CHUNKS, NO_CHUNKS)
            if not isinstance(low, int) or not isinstance(high, int):
                raise ValueError("chunk offsets must be integers")
        if count != len(tokens) or (choices and len(choices) != len(tokens)):
            raise ValueError("chunk_offsets_us and chunk_tokens must have the same length")
        total = sum(tokens) if count else 0
        if "chunk_count" in data:
            stored = _SUMMARY(data)
            if stored != ((count, low, high, total) if count else (0, None, None, total)):
                raise ValueError(f"the chunk summary {stored} disagrees with the chunk arrays")
        if live_ok and count and (estimated or side in self._keep):
            itl = token_latencies_us(chunk_offsets(data), tuple(tokens), tuple(choices))
            counts = c.itl_counts[side]
            for value, n in itl:
                counts[value] = counts.get(value, 0) + n
            if estimated:
                c.itl_estimated[side] += sum(n for _, n in itl)
        return low, high, count, total

    def _join(self, exp_id: str, pair_id: Any, side: int, i: int) -> None:
        """Record ``i`` (not a warm-up, with a pair id) into its pair's slot."""
        c = self.columns
        per = c.slots.get(exp_id)
        if per is None:
            per = c.slots[exp_id] = {}
        slot = per.get(pair_id)
        if slot is None:
            slot = per[pair_id] = len(c.slot_base)
            c.slot_base.append(-1)
            c.slot_cand.append(-1)
        column = c.slot_base if side == 0 else c.slot_cand
        if column[slot] >= 0:
            c.duplicates += 1
        else:
            column[slot] = i


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
