"""The names of a run directory's per-process files, and the order they are read in.

One writer names them (``recording``), one reader finds them (``report``), so both use
these functions. A proxy of one process writes ``requests.jsonl`` (rolled into
``requests-NNNNNN.jsonl``), ``histograms/<side>.hlog`` and ``specproxy.log``. With
``serve --workers N`` (N > 1) worker ``K`` (from 0) writes the same files with the shard
``wK`` in the name: ``requests.wK.jsonl`` (rolled into ``requests.wK-NNNNNN.jsonl``),
``histograms/<side>.wK.hlog``, ``specproxy.wK.log`` and, with ``--record``,
``trace.wK.jsonl`` (merged into ``trace.jsonl`` when the workers stop). The names never
match each other's patterns, so a reader that knows only the unsharded names reads none
of a worker's, and one run is every file here together. Pure string work: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

RECORDS_FILE = "requests.jsonl"
ROLLED_GLOB = "requests-*.jsonl"
SHARD_RECORDS_GLOB = "requests.w*.jsonl"
SHARD_TRACE_GLOB = "trace.w*.jsonl"
_RECORDS = re.compile(r"requests(?:\.w(\d+))?(?:-(\d+))?\.jsonl")
_HISTOGRAM = re.compile(r"(?P<side>[a-z]+)(?:\.w(?P<worker>\d+))?\.hlog")


def shard_name(worker: int) -> str:
    """The shard of worker ``worker`` (from 0): ``wK``."""
    if worker < 0:
        raise ValueError(f"worker must be >= 0, got {worker}")
    return f"w{worker}"


def _infix(shard: str | None) -> str:
    return "" if shard is None else f".{shard}"


def records_name(shard: str | None = None) -> str:
    """The live records file of ``shard`` (None: the one-process run's ``requests.jsonl``)."""
    return f"requests{_infix(shard)}.jsonl"


def rolled_name(number: int, shard: str | None = None) -> str:
    """File name of the ``number``-th rolled records file (from 1; sorts in write order)."""
    return f"requests{_infix(shard)}-{number:06d}.jsonl"


def rolled_glob(shard: str | None = None) -> str:
    """A glob matching exactly ``shard``'s rolled records files."""
    return f"requests{_infix(shard)}-*.jsonl"


def histogram_name(side: str, shard: str | None = None) -> str:
    """The histogram log of ``side`` (inside ``histograms/``)."""
    return f"{side}{_infix(shard)}.hlog"


def log_name(shard: str | None = None) -> str:
    """The run log (``request_completed`` lines) of ``shard``."""
    return f"specproxy{_infix(shard)}.log"


def trace_name(shard: str | None = None) -> str:
    """``serve --record``'s trace of ``shard`` (a worker's is merged into ``trace.jsonl``)."""
    return f"trace{_infix(shard)}.jsonl"


def order_record_files(names: Iterable[str]) -> list[str]:
    """The records files among ``names`` in read order: the one-process files first, then
    each worker's by number; within each, the rolled files by number, then the live one.
    Names that are not records files are left out."""
    keyed: list[tuple[int, int, str]] = []
    for name in names:
        match = _RECORDS.fullmatch(name)
        if match is None:
            continue
        worker, rolled = match.groups()
        keyed.append((-1 if worker is None else int(worker), int(rolled or 1 << 62), name))
    return [name for *_, name in sorted(keyed)]


def histogram_files(side: str, names: Iterable[str]) -> list[str]:
    """``side``'s histogram logs among ``names``: the one-process log, then each worker's."""
    keyed: list[tuple[int, str]] = []
    for name in names:
        match = _HISTOGRAM.fullmatch(name)
        if match is None or match["side"] != side:
            continue
        worker = match["worker"]
        keyed.append((-1 if worker is None else int(worker), name))
    return [name for _, name in sorted(keyed)]
