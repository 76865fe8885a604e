"""Responses the proxy writes itself: OpenAI-shaped errors and its own JSON documents.

Every error the proxy originates (not the primary's own errors, which pass through
untouched) has the body ``{"error": {"message", "type", "param", "code"}}`` so that
OpenAI clients raise their usual exception types with a readable message.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from specproxy.core.records.model import ErrorKind, Measurement, Role

JSON = "application/json"


def json_response(obj: Any, *, status: int = 200) -> web.Response:
    """``obj`` as compact JSON."""
    return web.Response(body=orjson.dumps(obj), status=status, content_type=JSON)


def error_response(
    status: int, message: str, *, type_: str, code: str, param: str | None = None
) -> web.Response:
    """An OpenAI-shaped error: ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return json_response(body, status=status)


async def expect_handler(request: web.Request) -> web.Response | None:
    """Every route's ``Expect`` handler: ``100-continue`` on HTTP/1.1 is answered as aiohttp
    does; any other value is a 417 that does not quote it (aiohttp's default answer echoes
    the value, and a value that is not UTF-8 made that answer fail with a 500)."""
    expect = request.headers.get("Expect", "")
    if request.version >= (1, 1) and expect.lower() == "100-continue":
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the final answer's head is still to come
        return None
    message = "the only Expect this proxy takes is 100-continue"
    return error_response(417, message, type_="invalid_request_error", code="expectation_failed")


def bad_request(
    message: str, *, code: str = "invalid_request", param: str | None = None
) -> web.Response:
    return error_response(400, message, type_="invalid_request_error", code=code, param=param)


def upstream_failure(side: Role, m: Measurement) -> web.Response:
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
