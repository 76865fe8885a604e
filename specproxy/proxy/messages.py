"""The proxy's own HTTP messages: the ``Request`` an own route reads, the ``Response`` it writes.

The proxy's server (``proxy.lean``) reads every request itself; a relayed one becomes a
``ProxiedRequest`` (``proxy.lean.plan``), any other a ``Request`` for the proxy's own routes
(``proxy.routes``). What the proxy answers itself, rather than relaying, is a ``Response``,
written whole by the server.

Every error the proxy originates (not the primary's own errors, which pass through
untouched) has the body ``{"error": {"message", "type", "param", "code"}}`` so that
OpenAI clients raise their usual exception types with a readable message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import orjson
from multidict import CIMultiDict

from specproxy.core.records.model import ErrorKind, Measurement, Role

JSON = "application/json"
BODILESS = frozenset({204, 304})  # answers that never have a body (RFC 9112 section 6.3)


@dataclass(slots=True)
class Request:
    """A whole request for one of the proxy's own routes (its body read and decoded)."""

    method: str
    path: str  # percent-decoded, without the query
    target: str  # the request-target as sent: path and query (what a relayed read sends on)
    query: str
    headers: CIMultiDict[str]
    body: bytes = b""

    def query_value(self, name: str) -> str | None:
        """The first value of query parameter ``name``, if any."""
        values = parse_qs(self.query).get(name)
        return values[0] if values else None


@dataclass(slots=True)
class Response:
    """A whole answer the proxy writes itself; ``close``: the connection ends after it."""

    status: int
    body: bytes = b""
    headers: CIMultiDict[str] = field(default_factory=CIMultiDict)
    close: bool = False


def json_response(obj: Any, *, status: int = 200) -> Response:
    """``obj`` as compact JSON."""
    return Response(status, orjson.dumps(obj), CIMultiDict({"Content-Type": JSON}))


def error_response(
    status: int, message: str, *, type_: str, code: str, param: str | None = None
) -> Response:
    """An OpenAI-shaped error: ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return json_response(body, status=status)


def refusal(
    status: int, message: str, code: str, *, type_: str = "invalid_request_error"
) -> Response:
    """A request the server will not read on (a 4xx of the client's own making): the
    connection closes after it."""
    resp = error_response(status, message, type_=type_, code=code)
    resp.close = True
    return resp


def malformed() -> Response:
    """Bytes that are not a request the server reads (400, then the close)."""
    message = "the request could not be parsed as HTTP (a malformed or oversized header line)"
    return refusal(400, message, "malformed_request")


def too_large(limit: int) -> Response:
    """A body over ``limit`` bytes (413, then the close: the rest of it is not read)."""
    return refusal(413, f"request body is larger than the limit of {limit} bytes", "body_too_large")


def unauthorized() -> Response:
    """A missing or wrong API key (401, then the close)."""
    message = "missing or wrong API key"
    return refusal(401, message, "invalid_api_key", type_="authentication_error")


def bad_request(
    message: str, *, code: str = "invalid_request", param: str | None = None
) -> Response:
    return error_response(400, message, type_="invalid_request_error", code=code, param=param)


def upstream_failure(side: Role, m: Measurement) -> Response:
    """504 when the primary timed out before answering; 502 for every other failure before headers."""
    detail = m.error_message or (m.error_kind.value if m.error_kind else "no response")
    if m.error_kind is ErrorKind.TIMEOUT:
        message = f"the {side} server did not answer in time: {detail}"
        return error_response(504, message, type_="upstream_error", code="upstream_timeout")
    if m.error_kind in (None, ErrorKind.CONNECT):
        message = f"the {side} server could not be reached: {detail}"
        return error_response(502, message, type_="upstream_error", code="upstream_unreachable")
    message = f"the {side} server's answer could not be used: {detail}"
    return error_response(502, message, type_="upstream_error", code="upstream_failed")
