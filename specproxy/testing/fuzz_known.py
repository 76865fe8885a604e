"""How the socket fuzz reads answers, and the known differences between the proxy and its
reference (``specproxy/testing/aiohttp_reference.py``), each shown by the reference itself on
changed bytes or by the bytes' own structure (``known_difference``).

Used by ``socket_fuzz`` and its tests.
"""

from __future__ import annotations

import asyncio
import itertools

from specproxy.core.protocol.headers import SIDE_HEADER
from specproxy.proxy.framing import chunked_end
from specproxy.testing.hostile import read_response

HANG_S = 5.0
RELAYED_STATUS = 200
OTHER_BODY = b'{"from":"the fuzz upstream"}'  # the upstream's 404 to a path not generation


def seen(status: int, headers: dict[str, str], body: bytes, *, relayed: bool = False) -> int:
    """An answer as counted: -500 for the proxy's own failure (a 500 that names no side),
    else its status; with ``relayed``, ``RELAYED_STATUS`` for an answer that came from the
    upstream (one that names its side, or a relayed call's ``OTHER_BODY``)."""
    from_upstream = SIDE_HEADER in headers or body == OTHER_BODY
    if status == 500 and SIDE_HEADER not in headers:
        return -500
    return RELAYED_STATUS if relayed and from_upstream else status


async def statuses(
    url: str, data: bytes, window_s: float, most: int = 0, *, relayed: bool = False
) -> tuple[int, ...]:
    """Write ``data`` on a new connection; the answers (``seen``) that came before the
    connection closed or nothing more came within ``window_s`` (a request still
    incomplete, or a keep-alive connection waiting for the next), or ``most`` final
    answers came (a ``100 Continue`` is kept, not counted)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 22)
    got: list[int] = []
    try:
        writer.write(data)
        while not most or len(got) - got.count(100) < most:
            async with asyncio.timeout(window_s):
                status, headers, body = await read_response(reader)
            got.append(seen(status, headers, body, relayed=relayed))
    except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        pass
    except (ConnectionError, ValueError, IndexError):
        pass
    finally:
        writer.close()
    return tuple(got)


def _framing(data: bytes) -> tuple[int, list[bytes], bool] | None:
    """The first head's end (its blank line's index), its Content-Length values and whether
    it is chunked (a Transfer-Encoding); None without a whole head."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = data[:end].lower().split(b"\r\n")[1:]
    lengths = [line[15:].strip() for line in lines if line.startswith(b"content-length:")]
    return end, lengths, any(line.startswith(b"transfer-encoding:") for line in lines)


def first_request(data: bytes) -> bytes | None:
    """The first request of ``data``, when more bytes follow it and its body is framed by a
    Content-Length (one, plain decimal), is chunked (its end found as the proxy finds it,
    ``proxy.framing.chunked_end``) or is empty; an HTTP/0.9 line (its line feed bare) with
    the blank line aiohttp waits for; else None."""
    line = data.find(b"\n")
    if line > 0 and data[line - 1 : line] != b"\r" and b" HTTP/" not in data[:line]:
        # HTTP/0.9: the line alone is the request (aiohttp answers it with the blank line)
        return data[: line + 1] + b"\r\n" if line + 1 < len(data) else None
    framing = _framing(data)
    if framing is None:
        return None
    end, lengths, chunked = framing
    if chunked:
        size = None if lengths else chunked_end(data, end + 4)
        return data[:size] if size is not None and size < len(data) else None
    if len(lengths) > 1 or (lengths and not lengths[0].isdigit()):
        return None
    size = end + 4 + (int(lengths[0]) if lengths else 0)
    return data[:size] if size < len(data) else None


def body_short(data: bytes) -> bool:
    """The first request's body, by its one plain Content-Length or chunked, is not all in
    ``data``."""
    framing = _framing(data)
    if framing is None:
        return False
    end, lengths, chunked = framing
    if chunked and not lengths:
        return chunked_end(data, end + 4) is None
    if len(lengths) != 1 or not lengths[0].isdigit():
        return False
    return len(data) - end - 4 < int(lengths[0])


def head_alone(data: bytes) -> bytes | None:
    """The first head of ``data`` without its body (its framing headers dropped), when it
    has one: what the proxy reads before it answers a path that is no route."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = data[:end].split(b"\r\n")
    framing = (b"content-length:", b"transfer-encoding:")
    kept = [line for line in lines if not line.lower().startswith(framing)]
    return b"\r\n".join(kept) + b"\r\n\r\n" if len(kept) < len(lines) else None


def spaced_head(data: bytes) -> bytes | None:
    """``data`` with a header of a one-byte name (``X: a``) before each line of its first
    head that follows a header line over 100 bytes; None when there is no such line."""
    end = data.find(b"\r\n\r\n")
    lines = data[: max(end, 0)].split(b"\r\n")
    out = lines[:2]
    for before, line in itertools.pairwise(lines[1:]):
        out += [b"X: a", line] if len(before) > 100 else [line]
    return b"\r\n".join(out) + data[end:] if len(out) > len(lines) else None


async def known_difference(
    reference: str, data: bytes, proxy: tuple[int, ...], refused: tuple[int, ...]
) -> str | None:
    """The name of the known difference that explains why the reference answered otherwise
    than the proxy, or None. Each is kept because the proxy's answer is the one HTTP asks
    for, and each but the last is shown by the reference itself, on changed bytes:

    - ``tail refused first``: the reference answers the first request alone as the proxy
      did, so its 400 came from the bytes after a whole request: aiohttp's parser fails
      the whole read and answers only its 400, dropping the request ahead of them. The
      proxy answers in order, as HTTP/1.1 requires: the request, then a 400 for a tail
      that does not parse, or nothing more after a request that asked to close (RFC 9112,
      9.6: no request after one with ``Connection: close`` is processed);
    - ``name carried over``: the reference takes the same bytes with a one-byte-named
      header after each long header line (``spaced_head``): aiohttp's C parser checks a
      header's name (and then its value) against ``MAX_FIELD_BYTES`` before it lets the
      previous header's name go (``cb_on_header_field``), so two names of 5,000 bytes are
      refused; the limit is each name's and each value's (``core.protocol.limits``);
    - both at once: the first request alone, spaced;
    - ``no route, body unread``: the proxy answered a path that is no route (404) or a
      method it does not take (405) on the head alone, and closed without reading the
      body; the reference, which reads the body first, answers the head alone the same;
    - ``waits for the body``: the proxy has not answered a request whose declared body is
      not all in ``data`` (``body_short``): it reads every body whole before it answers,
      where aiohttp runs a handler that reads none at once (``GET`` with a
      ``Content-Length``) and decodes a compressed body as it arrives (a broken one is its
      400 before the rest). Found by the structure of the bytes, not by the reference.
    """
    if not proxy and refused and body_short(data):
        return "waits for the body"
    if refused != (400,) or not proxy or proxy[0] == 400:
        return None
    first = first_request(data)
    changed = {"tail refused first": first, "name carried over": spaced_head(data)}
    if proxy[0] in (404, 405):
        changed["no route, body unread"] = head_alone(data)
    if first is not None:  # the two at once
        changed["tail refused first, name carried over"] = spaced_head(first)
    for name, variant in changed.items():
        if variant is not None and await _first_status(reference, variant) == proxy[0]:
            return name
    return None


async def _first_status(url: str, data: bytes) -> int | None:
    got = final_statuses(await statuses(url, data, HANG_S, most=1))
    return got[0] if got else None


def final_statuses(got: tuple[int, ...]) -> tuple[int, ...]:
    """The statuses less any ``100 Continue``: an interim answer, which the proxy writes once
    the head is read and aiohttp once its handler asks for the body (on a 404 too)."""
    return tuple(status for status in got if status != 100)
