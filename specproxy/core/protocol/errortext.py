"""What of an upstream error body may be recorded: its structure, never the request's content.

SGLang's 400 validation errors (pydantic's ``input_value=...``) and FastAPI's 422
(``detail[].input``) echo the request's values, prompt included, and a server may
quote any part of the request in a message. A record must not carry prompt text
unless the operator asked for it, so the recorded message keeps only:

- ``HTTP <status>``;
- the error's identifiers: ``type``, ``code`` and ``param`` (top level or under
  ``error``), when they look like identifiers (letters, digits, ``_.:/-``, up to 64);
- the *head* of the message: its first line up to the first character that starts a
  quoted or structured value (``"``, a quote ``'`` not inside a word, backtick,
  ``:``, ``=``, ``{``, ``[``, ``<``), at most 120 characters;
- for FastAPI's ``detail`` list, up to three entries as ``loc`` (identifier parts
  only), the head of ``msg`` and ``type``.

A body that is not JSON keeps nothing but its size. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

MAX_HEAD_CHARS = 120
MAX_DETAILS = 3
_IDENT = re.compile(r"^[A-Za-z0-9_.:/-]{1,64}$")
_LOC_PART = re.compile(r"^[A-Za-z0-9_]{1,40}$")
_CUT = re.compile(r"[\"`:={\[<\n\r]|(?<![A-Za-z0-9])'")

__all__ = ["MAX_HEAD_CHARS", "message_head", "summarize_error_body"]


def message_head(text: str) -> str:
    """The part of ``text`` before anything that may quote a value (see the module docstring)."""
    match = _CUT.search(text)
    head = text[: match.start()] if match else text
    return " ".join(head.split())[:MAX_HEAD_CHARS].rstrip(" ,;.(")


def _ident(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and _IDENT.match(value):
        return value
    return None


def _detail(entry: Any) -> str | None:
    if not isinstance(entry, Mapping):
        return None
    loc = entry.get("loc")
    parts = [str(p) for p in loc if _LOC_PART.match(str(p))] if isinstance(loc, list) else []
    msg = entry.get("msg")
    head = message_head(msg) if isinstance(msg, str) else ""
    kind = _ident(entry.get("type"))
    text = ".".join(parts)
    if head:
        text = f"{text}: {head}" if text else head
    if kind:
        text = f"{text} [{kind}]"
    return text or None


def _fields(obj: Mapping[str, Any]) -> list[str]:
    inner = obj.get("error")
    source: Mapping[str, Any] = inner if isinstance(inner, Mapping) else obj
    out: list[str] = []
    for name in ("type", "code", "param"):
        value = _ident(source.get(name))
        if value is not None:
            out.append(value if name == "type" else f"{name}={value}")
    message = source.get("message")
    if message is None and isinstance(inner, str):
        message = inner
    detail = obj.get("detail")
    if isinstance(detail, str) and message is None:
        message = detail
    if isinstance(message, str) and message_head(message):
        out.append(message_head(message))
    if isinstance(detail, list):
        found = [d for d in (_detail(e) for e in detail[:MAX_DETAILS]) if d]
        if found:
            out.append("; ".join(found))
    return out


def summarize_error_body(status: int, body: bytes) -> str:
    """The recordable summary of an HTTP error answer (``status`` >= 400) and its body."""
    obj: Any = None
    if body.lstrip()[:1] in (b"{", b"["):
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            obj = None
    if isinstance(obj, list) and obj and isinstance(obj[0], Mapping):
        obj = obj[0]
    parts: list[str] = []
    if isinstance(obj, Mapping):
        parts = _fields(obj)
    elif body.strip():
        parts = [f"non-JSON body of {len(body)} bytes, not kept"]
    return f"HTTP {status}: {'; '.join(parts)}" if parts else f"HTTP {status}"
