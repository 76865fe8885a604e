"""structlog, configured once: JSON lines rendered by orjson, context bound per task.

Event names are snake_case past tense (``request_completed``). Nothing here ever
receives prompt text, output text, an Authorization header or an API key: callers
pass ids, sizes and timings only; ``redact_processor`` is the safety net.
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping
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
