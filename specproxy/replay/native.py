"""specproxy's own trace format (``traces/README.md`` is its reference): parse and write one line.

One JSON object per line. Every line has ``t`` (arrival offset in seconds, >= 0) and
either a full request (``route`` + ``body``) or token lengths (``input_tokens`` +
``output_tokens``, optional ``hash_ids``). ``category`` is optional on both. Keys
starting with ``x_`` are ignored (room for annotations); any other unknown key is an
error, so a typo never silently changes a replay.
"""

from __future__ import annotations

from typing import Any

import orjson

from specproxy.core.records.model import Route
from specproxy.replay.trace import TraceRecord

_ROUTE_NAMES = {
    "chat": Route.CHAT,
    "completions": Route.COMPLETIONS,
    "generate": Route.GENERATE,
    **{r.value: r for r in Route},
}
_BODY_KEYS = frozenset({"t", "route", "body", "category"})
_LENGTH_KEYS = frozenset({"t", "input_tokens", "output_tokens", "hash_ids", "category"})


def parse_route(value: object) -> Route:
    """A route from its path (``/v1/chat/completions``) or short name (``chat``)."""
    if isinstance(value, str) and value in _ROUTE_NAMES:
        return _ROUTE_NAMES[value]
    names = ", ".join(sorted(_ROUTE_NAMES))
    raise ValueError(f"route must be one of {names}; got {value!r}")


def _number(obj: dict[str, Any], key: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key!r} must be a number, got {value!r}")
    return float(value)


def int_field(obj: dict[str, Any], key: str) -> int:
    """``obj[key]`` as an integer (not a bool); ValueError naming the key otherwise."""
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key!r} must be an integer, got {value!r}")
    return value


def _category(obj: dict[str, Any]) -> str | None:
    value = obj.get("category")
    if value is not None and not isinstance(value, str):
        raise ValueError(f"'category' must be a string, got {value!r}")
    return value


def hash_ids_field(obj: dict[str, Any]) -> tuple[int, ...]:
    """``obj["hash_ids"]`` (default empty) as integers; ValueError otherwise."""
    value = obj.get("hash_ids", [])
    if not isinstance(value, list) or any(
        isinstance(h, bool) or not isinstance(h, int) for h in value
    ):
        raise ValueError("'hash_ids' must be a list of integers")
    return tuple(value)


def _check_keys(obj: dict[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(k for k in obj if k not in allowed and not k.startswith("x_"))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")


def parse_native(obj: object, path: str, line: int) -> TraceRecord:
    """One native line (already JSON-decoded) as a record; ValueError names the problem."""
    if not isinstance(obj, dict):
        raise ValueError("a native trace line must be a JSON object")
    if "t" not in obj:
        raise ValueError("missing 't' (arrival offset in seconds)")
    offset_s = _number(obj, "t")
    if "body" in obj or "route" in obj:
        _check_keys(obj, _BODY_KEYS)
        body = obj.get("body")
        if not isinstance(body, dict):
            raise ValueError("'body' must be a JSON object (the request body)")
        return TraceRecord(
            source_path=path,
            source_line=line,
            offset_s=offset_s,
            route=parse_route(obj.get("route")),
            body=body,
            category=_category(obj),
        )
    if "input_tokens" not in obj:
        raise ValueError("a line needs 'route' and 'body', or 'input_tokens' and 'output_tokens'")
    _check_keys(obj, _LENGTH_KEYS)
    return TraceRecord(
        source_path=path,
        source_line=line,
        offset_s=offset_s,
        input_tokens=int_field(obj, "input_tokens"),
        output_tokens=int_field(obj, "output_tokens"),
        hash_ids=hash_ids_field(obj),
        category=_category(obj),
    )


def to_native(record: TraceRecord) -> dict[str, Any]:
    """The native JSON object for ``record`` (body or lengths kinds; text records are refused)."""
    if record.offset_s is None:
        raise ValueError("a native line needs an arrival offset")
    out: dict[str, Any] = {"t": record.offset_s}
    if record.body is not None and record.route is not None:
        out["route"] = record.route.value
        out["body"] = dict(record.body)
    elif record.input_tokens is not None:
        if record.output_tokens is None:
            raise ValueError("a native length line needs output_tokens")
        out["input_tokens"] = record.input_tokens
        out["output_tokens"] = record.output_tokens
        if record.hash_ids:
            out["hash_ids"] = list(record.hash_ids)
    else:
        raise ValueError("text-prompt records have no native form; write a request body instead")
    if record.category is not None:
        out["category"] = record.category
    return out


def dump_native_line(record: TraceRecord) -> bytes:
    """``to_native(record)`` as one JSON line, newline included."""
    return orjson.dumps(to_native(record)) + b"\n"
