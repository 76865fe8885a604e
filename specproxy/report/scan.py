"""One pass over a run's records files into columns, split over processes when large.

The report's one hot loop: every line is parsed once (orjson; a schema-3 line without its
chunk arrays, ``core.records.chunk_span.cut_chunk_arrays``, in C where it can be: ``cut_line``) and handed to
``core.records.columns.ColumnBuilder``, about 10 µs a 2.6 kB line on the 2-core machine the
README's scale table was measured on. From ``PARALLEL_BYTES`` of records on, the files
are cut into byte ranges at line starts, one per usable CPU (``os.sched_getaffinity``, at
most ``MAX_WORKERS``), the ranges are shared out in consecutive groups of about equal bytes
(``balance``), each group is read into columns in a forked process (the first in this
one), and the parts are joined in file order by ``core.records.column_concat.concat``, which
also joins the pairs whose two records fell in different ranges. The figures cannot
tell the difference (``tests/report/test_scale_equivalence.py`` reads runs both ways).
"""

from __future__ import annotations

import functools
import gc
import itertools
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import orjson

from specproxy.core.records.chunk_span import Cut, cut_chunk_arrays
from specproxy.core.records.column_concat import concat
from specproxy.core.records.columns import ColumnBuilder, RecordColumns, RecordError
from specproxy.core.speedups import SPEEDUPS
from specproxy.errors import ConfigError

PARALLEL_BYTES = 64 << 20
_C_CUT = getattr(SPEEDUPS, "cut_chunk_arrays", None)  # None without C (or a build before it)
MAX_WORKERS = 8
Range = tuple[str, int, int]
P = ParamSpec("P")
T = TypeVar("T")


def without_gc(func: Callable[P, T]) -> Callable[P, T]:
    """``func`` run with the cyclic garbage collector paused, then as it was: a report's
    passes make millions of objects and no cycles (reference counts free them), and each
    collection would walk every long-lived one again (a tenth of a 300,000-record report's
    CPU). Processes forked meanwhile (the scan's, ``report.beside``'s) inherit the pause."""

    @functools.wraps(func)
    def paused(*args: P.args, **kwargs: P.kwargs) -> T:
        if not gc.isenabled():
            return func(*args, **kwargs)
        gc.disable()
        try:
            return func(*args, **kwargs)
        finally:
            gc.enable()

    return paused


def line_number(path: Path, offset: int) -> int:
    """1-based number of the line starting at byte ``offset`` (only for error messages)."""
    with path.open("rb") as fh:
        return fh.read(offset).count(b"\n") + 1


def cut_line(raw: bytes) -> Cut | None:
    """``core.records.chunk_span.cut_chunk_arrays(raw)``, in C (``core._speedups``) where it takes the
    line (its first chunk gap a plain integer), else by that function, the reference."""
    found = _C_CUT(raw) if _C_CUT is not None else None
    return found if found is not None else cut_chunk_arrays(raw)


def _parse(raw: bytes) -> tuple[Any, Cut | None]:
    """``raw`` parsed without its chunk arrays where it can be, else in full (so that a
    line that is not JSON fails as the whole line does)."""
    cut = cut_line(raw)
    if cut is not None:
        try:
            return orjson.loads(cut[0]), cut
        except orjson.JSONDecodeError:
            pass
    return orjson.loads(raw), None


def iter_record_dicts(
    path: Path, skipped: list[int], start: int = 0, end: int | None = None
) -> Iterator[tuple[int, bytes, dict[str, Any], Cut | None]]:
    """``(byte offset, line, record dict, cut)`` per line of ``path`` from byte ``start`` (a
    line start) to ``end``, streamed. A line that ends in its chunk arrays as schema 3
    writes them is parsed without them (``core.records.chunk_span.cut_chunk_arrays``: ``cut`` says
    what they held; parse ``line`` in full when the arrays are needed after all), any other
    line in full (``cut`` None). A final line cut off mid-write (no newline, not JSON) is
    skipped and its offset put in ``skipped``; any other line that is not a JSON object is
    a ConfigError naming ``file:line``."""
    offset = start
    decode_error = orjson.JSONDecodeError
    try:
        with path.open("rb", buffering=1 << 20) as fh:
            fh.seek(start)
            for raw in fh:
                if end is not None and offset >= end:
                    return
                at, offset = offset, offset + len(raw)
                try:
                    data, cut = _parse(raw)
                except decode_error as exc:
                    if not raw.strip():
                        continue
                    if not raw.endswith(b"\n"):
                        skipped.append(at)
                        continue
                    line = line_number(path, at)
                    raise ConfigError(f"{path}:{line}: not a request record: {exc}") from exc
                if type(data) is not dict:
                    line = line_number(path, at)
                    raise ConfigError(f"{path}:{line}: not a request record: not a JSON object")
                yield at, raw, data, cut
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc


def _refused(path: Path, offset: int, exc: Exception) -> ConfigError:
    """A ConfigError naming ``file:line`` of the record at ``offset`` (or, for a
    RecordError, of the record it names) and what is wrong with it."""
    if isinstance(exc, RecordError):
        offset, exc = exc.offset, exc.problem
    return ConfigError(f"{path}:{line_number(path, offset)}: not a request record: {exc!r}")


@without_gc
def scan_range(part: Range, keep_sides: frozenset[int]) -> tuple[RecordColumns, int]:
    """The columns of one byte range of one records file, and its cut-off lines."""
    name, start, end = part
    path = Path(name)
    columns = RecordColumns((name,))
    builder = ColumnBuilder(columns, keep_sides)
    add, loads = builder.add, orjson.loads
    skipped: list[int] = []
    for offset, raw, data, cut in iter_record_dicts(path, skipped, start, end):
        try:
            if not add(data, 0, offset, raw, cut):
                add(loads(raw), 0, offset, raw)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise _refused(path, offset, exc) from exc
    try:
        builder.flush()
    except RecordError as exc:
        raise _refused(path, 0, exc) from exc
    return columns, len(skipped)


def scan_group(
    group: Sequence[Range], keep_sides: frozenset[int]
) -> list[tuple[RecordColumns, int]]:
    """``scan_range`` of each range of ``group``, in order (one process's share)."""
    return [scan_range(r, keep_sides) for r in group]


def balance(ranges: Sequence[Range], parts: int) -> list[list[Range]]:
    """``ranges`` in order, cut into at most ``parts`` consecutive groups of about equal
    bytes (a rolled set of many small files spreads over the processes too)."""
    total = sum(end - start for _, start, end in ranges)
    groups: list[list[Range]] = [[]]
    done = 0
    for r in ranges:
        if groups[-1] and done >= total * len(groups) / parts and len(groups) < parts:
            groups.append([])
        groups[-1].append(r)
        done += r[2] - r[1]
    return groups


def workers() -> int:
    """CPUs this process may run on (at most ``MAX_WORKERS``)."""
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return max(1, min(MAX_WORKERS, len(usable) if usable else (os.cpu_count() or 1)))


def split_ranges(files: Sequence[Path], parts: int) -> list[Range]:
    """``files`` cut into about ``parts`` byte ranges of equal size, each starting at a
    line start, in file order."""
    sizes = [f.stat().st_size for f in files]
    step = max(1, sum(sizes) // max(1, parts))
    out: list[Range] = []
    for path, size in zip(files, sizes, strict=True):
        cuts = [0]
        with path.open("rb") as fh:
            at = step
            while at < size:
                fh.seek(at - 1)
                fh.readline()  # to the end of the line holding byte at - 1
                if fh.tell() >= size:
                    break
                if fh.tell() > cuts[-1]:
                    cuts.append(fh.tell())
                at = fh.tell() + step
        cuts.append(size)
        out += [(str(path), a, b) for a, b in itertools.pairwise(cuts) if b > a]
    return out


def scan_columns(
    files: Sequence[Path], keep_sides: frozenset[int], parallel: int | None = None
) -> tuple[RecordColumns, int]:
    """All records of ``files`` as one ``RecordColumns`` and the count of cut-off lines;
    ``parallel`` processes (default: ``workers()`` from ``PARALLEL_BYTES`` of records on)."""
    if parallel is None:
        total = sum(f.stat().st_size for f in files)
        parallel = workers() if total >= PARALLEL_BYTES else 1
    ranges = split_ranges(files, parallel) if parallel > 1 else [
        (str(f), 0, f.stat().st_size) for f in files
    ]  # fmt: skip
    groups = balance(ranges, parallel) if parallel > 1 else [ranges]
    if len(groups) <= 1:
        parts = [scan_range(r, keep_sides) for r in ranges]
    else:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(len(groups) - 1, mp_context=context) as pool:
            later = [pool.submit(scan_group, g, keep_sides) for g in groups[1:]]
            parts = scan_group(groups[0], keep_sides)
            for future in later:
                parts += future.result()
    if not parts:
        return RecordColumns(()), 0
    return concat([p[0] for p in parts]), sum(p[1] for p in parts)
