"""Read one saved run directory: experiment, records, snapshots, histogram logs.

The only file reading of the report layer: plain blocking ``open`` (a report runs with
no event loop). Records are read in one buffered pass over the rolled set and the live
``requests.jsonl`` (``record_files``): each line is parsed once (orjson) and the fields
the figures need go into columns (``core.records.columns``), so a day's run fits in memory and no
``RequestRecord`` is built. Tolerates what a killed run leaves behind: a missing
``experiment.json``, missing snapshots or histograms, and a final ``requests.jsonl`` line cut off mid-write (skipped and counted).
Any other unreadable line is an error naming ``file:line``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from specproxy.core.measurement.histogram import LatencyHistogram, parse_histogram_log
from specproxy.core.records.columns import SIDES, RecordColumns
from specproxy.core.records.model import Role, chunk_offsets
from specproxy.core.records.runfiles import (
    RECORDS_FILE,
    ROLLED_GLOB,
    SHARD_RECORDS_GLOB,
    histogram_files,
    order_record_files,
)
from specproxy.core.speedups import SPEEDUPS
from specproxy.errors import ConfigError, ProtocolError
from specproxy.report.scan import cut_line, scan_columns

EXPERIMENT_FILE = "experiment.json"
_C_RUNS = getattr(SPEEDUPS, "window_runs", None)  # None without C (or a build before it)
UNCLEAN_STATUS = "aborted (unclean)"


@dataclass(frozen=True, slots=True)
class RunData:
    """Everything a report needs from one run directory.

    ``columns`` holds the records' figures' fields (``core.records.columns``). ``snapshots`` maps ``(side,
    "before"|"after")`` to the snapshot dict; ``histograms`` maps ``(side, tag)`` to the
    merged intervals of that tag.
    """

    path: str
    experiment: dict[str, Any]
    columns: RecordColumns
    requests_file_found: bool
    truncated_lines: int
    snapshots: dict[tuple[Role, str], dict[str, Any]] = field(default_factory=dict)
    histograms: dict[tuple[Role, str], LatencyHistogram] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    scores: tuple[dict[str, Any], ...] = ()  # scores.jsonl lines (replay.scoring)
    scoring: dict[str, Any] | None = None  # scoring.json: the scoring requests' counts


def _read_scores(run_dir: Path) -> tuple[tuple[dict[str, Any], ...], dict[str, Any] | None]:
    """``scores.jsonl`` and ``scoring.json`` of the output-distribution check, when present."""
    counts_path, lines_path = run_dir / "scoring.json", run_dir / "scores.jsonl"
    counts = _read_json(counts_path) if counts_path.is_file() else None
    lines: list[dict[str, Any]] = []
    if lines_path.is_file():
        with lines_path.open(encoding="utf-8") as fh:
            for number, text in enumerate(fh, 1):
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{lines_path}:{number}: not valid JSON: {exc.msg}") from exc
                if isinstance(value, dict):
                    lines.append(value)
    return tuple(lines), counts if isinstance(counts, dict) else None


def _read_json(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc


def record_files(run_dir: Path) -> list[Path]:
    """The run's record files in write order: the rolled ``requests-NNNNNN.jsonl`` (``serve
    --rotate-mb/--rotate-s``) by number, then the live ``requests.jsonl``; then each worker's
    (``serve --workers N``: ``core.records.runfiles``), worker by worker, in the same order."""
    rolled = sorted(run_dir.glob(ROLLED_GLOB))
    live = run_dir / RECORDS_FILE
    shards = order_record_files(p.name for p in run_dir.glob(SHARD_RECORDS_GLOB))
    return [*rolled, *([live] if live.is_file() else []), *(run_dir / n for n in shards)]


class ChunkReader:
    """Reads one record's chunk arrays back from its line (``RecordColumns`` gives where);
    a context manager that keeps each records file open while in use."""

    def __init__(self) -> None:
        self._open: dict[str, BinaryIO] = {}

    def __enter__(self) -> ChunkReader:
        return self

    def __exit__(self, *exc: object) -> None:
        for fh in self._open.values():
            fh.close()
        self._open.clear()

    def _line(self, columns: RecordColumns, i: int) -> tuple[str, bytes]:
        path = columns.files[columns.file_index[i]]
        fh = self._open.get(path)
        if fh is None:
            fh = self._open[path] = Path(path).open("rb")  # noqa: SIM115 (closed by __exit__)
        fh.seek(columns.line_offset[i])
        return path, fh.readline()

    def __call__(self, columns: RecordColumns, i: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        path, line = self._line(columns, i)
        try:
            data = orjson.loads(line)
            return chunk_offsets(data), tuple(data.get("chunk_tokens") or ())
        except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(
                f"{path}: record at byte {columns.line_offset[i]} changed: {exc}"
            ) from exc

    def runs(
        self, columns: RecordColumns, i: int, base: float, scale: float, last: int
    ) -> list[tuple[int, int]] | None:
        """Record ``i``'s chunk tokens per throughput window in C (``core._speedups
        .window_runs``; ``report.timeline`` says what they are), the line before its arrays
        parsed as the whole line is in Python; None where C does not take the line."""
        if _C_RUNS is None:
            return None
        path, line = self._line(columns, i)
        runs = _C_RUNS(line, base, scale, last)
        cut = cut_line(line) if runs is not None else None
        if cut is not None:
            try:
                orjson.loads(cut[0])
            except orjson.JSONDecodeError as exc:
                raise ConfigError(
                    f"{path}: record at byte {columns.line_offset[i]} changed: {exc}"
                ) from exc
        return runs if cut is not None else None


def _read_snapshots(run_dir: Path) -> dict[tuple[Role, str], dict[str, Any]]:
    out: dict[tuple[Role, str], dict[str, Any]] = {}
    for side in Role:
        for when in ("before", "after"):
            path = run_dir / "snapshots" / f"{side.value}-{when}.json"
            if path.is_file():
                data = _read_json(path)
                if isinstance(data, dict):
                    out[(side, when)] = data
    return out


def _read_histograms(run_dir: Path) -> tuple[dict[tuple[Role, str], LatencyHistogram], list[str]]:
    out: dict[tuple[Role, str], LatencyHistogram] = {}
    problems: list[str] = []
    folder = run_dir / "histograms"
    names = [p.name for p in folder.iterdir() if p.is_file()] if folder.is_dir() else []
    for side in Role:
        for name in histogram_files(side.value, names):  # one log, or one per worker
            path = folder / name
            try:
                _, intervals = parse_histogram_log(path.read_text(encoding="utf-8"))
            except (ProtocolError, OSError, UnicodeDecodeError) as exc:
                problems.append(f"{path}: histogram log unreadable ({exc}); records used instead")
                continue
            for iv in intervals:
                merged = out.setdefault((side, iv.tag or "untagged"), LatencyHistogram())
                merged.merge(iv.histogram)
    return out, problems


def load_run_dir(path: str | Path) -> RunData:
    """Read ``path`` in one streamed pass into columns; ConfigError when it is not a run
    directory or a file is unreadable.

    A side without an ``itl_us`` histogram log has its per-token latencies counted from
    the records' chunks as they pass.
    """
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: not a directory")
    exp_path = run_dir / EXPERIMENT_FILE
    experiment: Any = _read_json(exp_path) if exp_path.is_file() else {}
    if not isinstance(experiment, dict):
        raise ConfigError(f"{exp_path}: expected a JSON object")
    files = record_files(run_dir)
    if not files and not experiment:
        raise ConfigError(f"{run_dir}: neither {EXPERIMENT_FILE} nor {RECORDS_FILE}: not a run dir")
    histograms, problems = _read_histograms(run_dir)
    keep = frozenset(i for i, side in enumerate(SIDES) if (side, "itl_us") not in histograms)
    columns, truncated = scan_columns(files, keep)
    if truncated:
        problems.append(f"{run_dir / RECORDS_FILE}: skipped a final line cut off mid-write")
    if experiment.get("status") == "running":  # nobody wrote the end: the process was killed
        experiment = {**experiment, "status": UNCLEAN_STATUS}
        problems.append(
            f"{exp_path}: status running -> {UNCLEAN_STATUS}: the run did not shut down "
            "(killed?); figures come from the records written so far, histogram logs may be "
            "missing or older than the records"
        )
    return RunData(
        path=str(run_dir),
        experiment=experiment,
        columns=columns,
        requests_file_found=bool(files),
        truncated_lines=truncated,
        snapshots=_read_snapshots(run_dir),
        histograms=histograms,
        problems=tuple(problems),
        scores=(scored := _read_scores(run_dir))[0],
        scoring=scored[1],
    )
