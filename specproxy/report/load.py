"""Read one saved run directory: experiment, records, snapshots, histogram logs.

The only file reading of the report layer: plain blocking ``open`` (a report runs with
no event loop). Tolerates what a killed run leaves behind: a missing
``experiment.json``, missing snapshots or histograms, and a final ``requests.jsonl``
line cut off mid-write (skipped and counted). Any other unreadable line is an error
naming ``file:line``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from specproxy.core.histogram import LatencyHistogram, parse_histogram_log
from specproxy.core.model import RequestRecord, Role
from specproxy.errors import ConfigError, ProtocolError

RECORDS_FILE = "requests.jsonl"
EXPERIMENT_FILE = "experiment.json"
UNCLEAN_STATUS = "aborted (unclean)"


@dataclass(frozen=True, slots=True)
class RunData:
    """Everything a report needs from one run directory.

    ``snapshots`` maps ``(side, "before"|"after")`` to the snapshot dict;
    ``histograms`` maps ``(side, tag)`` to the merged intervals of that tag.
    """

    path: str
    experiment: dict[str, Any]
    records: tuple[RequestRecord, ...]
    requests_file_found: bool
    truncated_lines: int
    snapshots: dict[tuple[Role, str], dict[str, Any]] = field(default_factory=dict)
    histograms: dict[tuple[Role, str], LatencyHistogram] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


def _read_json(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc


def read_records(path: Path) -> tuple[list[RequestRecord], int]:
    """Records of ``requests.jsonl`` and how many cut-off final lines were skipped."""
    records: list[RequestRecord] = []
    try:
        with path.open("rb") as fh:
            lines = fh.read().split(b"\n")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    truncated = 0
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        last = lineno == len(lines)  # no newline after it: possibly cut off mid-write
        try:
            data = orjson.loads(raw)
            if not isinstance(data, dict):
                raise ProtocolError("not a JSON object")
            records.append(RequestRecord.from_dict(data))
        except (orjson.JSONDecodeError, ProtocolError) as exc:
            if last and isinstance(exc, orjson.JSONDecodeError):
                truncated += 1
                continue
            raise ConfigError(f"{path}:{lineno}: not a request record: {exc}") from exc
    return records, truncated


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
    for side in Role:
        path = run_dir / "histograms" / f"{side.value}.hlog"
        if not path.is_file():
            continue
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
    """Read ``path``; ConfigError when it is not a run directory or a file is unreadable."""
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: not a directory")
    exp_path = run_dir / EXPERIMENT_FILE
    experiment: Any = _read_json(exp_path) if exp_path.is_file() else {}
    if not isinstance(experiment, dict):
        raise ConfigError(f"{exp_path}: expected a JSON object")
    rec_path = run_dir / RECORDS_FILE
    found = rec_path.is_file()
    if not found and not experiment:
        raise ConfigError(f"{run_dir}: neither {EXPERIMENT_FILE} nor {RECORDS_FILE}: not a run dir")
    records, truncated = read_records(rec_path) if found else ([], 0)
    histograms, problems = _read_histograms(run_dir)
    if truncated:
        problems.append(f"{rec_path}: skipped a final line cut off mid-write")
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
        records=tuple(records),
        requests_file_found=found,
        truncated_lines=truncated,
        snapshots=_read_snapshots(run_dir),
        histograms=histograms,
        problems=tuple(problems),
    )
