"""structlog, configured once: JSON lines rendered by orjson, context bound per task.

Event names are snake_case past tense (``request_completed``). Nothing here ever
receives prompt text, output text, an Authorization header or an API key: callers
pass ids, sizes and timings only; ``redact_processor`` is the safety net.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import orjson
import structlog

_SECRET_KEYS = frozenset(
    {"authorization", "api_key", "admin_api_key", "prompt", "text", "messages"}
)
_configured = False


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time of the write.

    structlog keeps the file it was given; a process (or a test runner) that replaces
    ``sys.stderr`` later would otherwise leave the log writing to a closed stream.
    """

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def redact_processor(
    _logger: Any, _name: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Replace values of keys that may hold secrets or prompt text."""
    for key in list(event):
        if key.lower() in _SECRET_KEYS:
            event[key] = "[redacted]"
    return event


def _orjson_dumps(obj: Any, default: Any = None) -> str:
    return orjson.dumps(obj, default=default or str).decode()


def configure(stream: TextIO | None = None, *, level: int = 20) -> None:
    """Configure structlog to write JSON lines to ``stream`` (stderr by default). Idempotent."""
    global _configured  # noqa: PLW0603 - configuring the process-wide logger exactly once
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact_processor,
            structlog.processors.JSONRenderer(serializer=_orjson_dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=stream or _CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    _configured = True


def get_logger(**context: Any) -> Any:
    """A bound logger carrying ``context`` (experiment id, side, fingerprint...)."""
    if not _configured:
        configure()
    return structlog.get_logger().bind(**context)


def file_logger(stream: TextIO, **context: Any) -> Any:
    """A logger that writes JSON lines to ``stream`` (e.g. a run directory's specproxy.log)."""
    logger = structlog.wrap_logger(
        structlog.PrintLogger(file=stream),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact_processor,
            structlog.processors.JSONRenderer(serializer=_orjson_dumps),
        ],
    )
    return logger.bind(**context)


class LineLog:
    """JSON lines in ``file_logger``'s format, written to ``path`` in batches: for the one
    line per request that a run log carries (``recording.Recorder``).

    A line is rendered as ``file_logger`` renders it (context, fields, ``event``,
    ``level``, ``timestamp``; secret keys redacted) at a fraction of the cost: no
    processor chain, and no write and flush per line. Waiting lines are appended in one
    write (``O_APPEND``: whole lines, also beside another writer of the same file) by the
    first line that finds ``flush_s`` passed since the last write, when 64 KiB are
    waiting, and at ``flush`` and ``close``. A killed process loses the lines waiting:
    while lines keep coming, those of about the last ``flush_s``; after the last one, all
    since the last write, unless the owner calls ``flush`` (``recording.Recorder`` does,
    with its histograms, every few seconds).
    """

    __slots__ = ("_clock", "_context", "_fd", "_flush_s", "_last", "_size", "_waiting")

    def __init__(
        self,
        path: Path,
        *,
        flush_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        **context: Any,
    ) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._context = context
        self._flush_s = flush_s
        self._clock = clock
        self._last = clock()
        self._waiting: list[bytes] = []
        self._size = 0

    def info(self, event: str, **fields: Any) -> None:
        """Append one ``level: info`` line."""
        line = {**self._context, **fields}
        if not _SECRET_KEYS.isdisjoint(map(str.lower, line)):
            redact_processor(None, "info", line)
        line["event"] = event
        line["level"] = "info"
        line["timestamp"] = datetime.now(UTC).replace(tzinfo=None).isoformat() + "Z"
        data = orjson.dumps(line, default=str, option=orjson.OPT_APPEND_NEWLINE)
        self._waiting.append(data)
        self._size += len(data)
        if self._size >= 1 << 16 or self._clock() - self._last >= self._flush_s:
            self.flush()

    def flush(self) -> None:
        """Write every waiting line now."""
        self._last = self._clock()
        if not self._waiting:
            return
        data = b"".join(self._waiting)
        self._waiting.clear()
        self._size = 0
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        """Flush and close. Idempotent."""
        if self._fd < 0:
            return
        self.flush()
        os.close(self._fd)
        self._fd = -1
