"""Request records as columns: only the fields the report's figures read, in compact arrays.

Pure. ``ColumnBuilder`` takes each record's dict as its line was parsed and appends the
fields the figures need to ``array`` columns (about 150 bytes a record, whatever its size),
refusing what ``RequestRecord.from_dict`` refuses (and, stricter, a latency or token count
that is not an integer). The figures over these columns are in ``core.compare.column_figures``
and ``core.compare.column_acceptance``; ``tests/report/test_scale_equivalence.py`` holds
them equal to the record definitions. Columns are read-only once their pass is done.

Encoding: a missing integer is ``NULL``; a missing accept length is NaN (JSON has none);
a missing code (error kind, mode, acceptance source, category) is -1. Per record the
chunk arrays are reduced to their **span** (``core.records.chunk_span``: earliest and latest chunk
offset and the sum of chunk tokens, from the arrays or, when ``cut_chunk_arrays`` cut them
off the line, from their summary) with where the line starts, so that a caller with file
access can read the few it needs again (``report.timeline``). Per-token latencies are
counted here, from the arrays, where they are asked for.

Pairs are joined as the records arrive (``(experiment_id, pair_id)`` to a slot in
first-seen order, ``core.compare.pairing.find_pairs``'s rule): a slot keeps the index of
each side's first record; a second one on a filled side is a duplicate. Output hashes are
kept as 32 raw bytes (anything but a lowercase 64-hex ``output_sha256`` goes in ``odd_sha``).
The fields read, their defaults and checks are ``core.records.record_fields``'; several parts'
columns are joined into one by ``core.records.column_concat.concat``.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import Any

from specproxy.core.measurement.timing import token_latencies_us
from specproxy.core.records.chunk_span import Cut, Span, array_span, summary_span
from specproxy.core.records.model import (
    AcceptanceSource,
    ErrorKind,
    Role,
    SendMode,
    chunk_offsets,
)
from specproxy.core.records.record_fields import ROUTES, check_fields, read_fields

NULL = -(1 << 63)
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
_ROW = (
    "side", "warmup", "error", "mode", "experiment", "category", "sent", "e2e", "ttft", "tpot",
    "tokens", "lag", "load", "acc_source", "acc_length", "acc_steps", "block", "low", "high",
    "chunk_tokens", "prompt", "file_index", "line_offset",
)  # fmt: skip
"""The columns one record adds a value to, in the order of ``ColumnBuilder``'s rows."""
BATCH = 4096
"""Records held as rows before their values go into the columns (``ColumnBuilder.flush``)."""


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


class RecordError(ValueError):
    """A record refused when its batch went into the columns (``ColumnBuilder.flush``):
    ``offset`` is where its line starts in file ``file_index``."""

    def __init__(self, file_index: int, offset: int, problem: Exception) -> None:
        super().__init__(repr(problem))
        self.file_index, self.offset, self.problem = file_index, offset, problem


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
        fields = read_fields(data)
        (
            exp_id, request_id, side_name, route, _, _, _, _, warmup, error_name,
            _, _, e2e, ttft, tpot, headers, _, _, load, _, _, pair_id, _, _, estimated, _,
        ) = fields  # fmt: skip
        side = _SIDE.get(side_name) if type(side_name) is str else None
        if side is None:
            raise ValueError(f"{side_name!r} is not a valid side")
        if (
            route not in ROUTES or not request_id or load < 0
            or (e2e is not None and e2e < 0) or (ttft is not None and ttft < 0)
            or (tpot is not None and tpot < 0) or (headers is not None and headers < 0)
        ):  # fmt: skip
            check_fields(route, request_id, load, e2e, ttft, tpot, headers)  # raises, naming it
        error = -1 if error_name is None else _code(_ERROR, error_name, "error kind")
        span = self._span(
            data, raw, cut, side, live_ok=error < 0 and not warmup, estimated=bool(estimated)
        )
        if span is None:
            return False
        i = self._count
        self._count = i + 1
        self._rows.append(
            self._row(fields, side, error, span, i, file_index=file_index, line_offset=line_offset)
        )
        if not warmup:
            self._join(exp_id, pair_id, side, i)
        if len(self._rows) >= BATCH:
            self.flush()
        return True

    def _span(
        self,
        data: dict[str, Any],
        raw: bytes,
        cut: Cut | None,
        side: int,
        *,
        live_ok: bool,
        estimated: bool,
    ) -> Span | None:
        """The record's chunk span: from its arrays without ``cut``, else from their summary;
        None when the summary cannot stand for them (none, one that does not fit, or
        per-token latencies to count)."""
        if cut is None:
            return self._chunks(data, raw, side, live_ok, estimated)
        summary = summary_span(data, cut)
        if summary is None or (live_ok and summary[2] and (estimated or side in self._keep)):
            return None
        return summary

    def _row(
        self,
        fields: tuple[Any, ...],
        side: int,
        error: int,
        span: Span,
        i: int,
        *,
        file_index: int,
        line_offset: int,
    ) -> tuple[Any, ...]:
        """Record ``i``'s values in ``_ROW``'s order (``fields`` in ``_FIELDS``' order); its
        acceptance histogram, odd output hash and output text are kept beside the rows."""
        (
            exp_id, _, _, _, _, _, sent, actual, warmup, _,
            mode_name, category, e2e, ttft, tpot, _, tokens, intended, load, acc, labels,
            _, sha, text, _, prompt,
        ) = fields  # fmt: skip
        code = self._experiments.get(exp_id)
        if acc is None:
            acc_source, acc_length, acc_steps = -1, math.nan, NULL
        else:
            acc_source, acc_length, acc_steps = self._acceptance(acc, i)
        self._output(sha, text, i)
        return (
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
        )  # fmt: skip

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
        """The span of the record's chunks read from its arrays (``array_span``); per-token
        latencies counted where asked."""
        span = array_span(data, raw)
        if live_ok and span[2] and (estimated or side in self._keep):
            c = self.columns
            tokens = data.get("chunk_tokens") or ()
            choices = data.get("chunk_choices") or ()
            itl = token_latencies_us(chunk_offsets(data), tuple(tokens), tuple(choices))
            counts = c.itl_counts[side]
            for value, n in itl:
                counts[value] = counts.get(value, 0) + n
            if estimated:
                c.itl_estimated[side] += sum(n for _, n in itl)
        return span

    def _join(self, exp_id: str, pair_id: Any, side: int, i: int) -> None:
        """Record ``i`` (not a warm-up) into its pair's slot; one without a pair id is
        counted (``without_pair_id``)."""
        c = self.columns
        if pair_id is None:
            c.without_pair_id += 1
            return
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
