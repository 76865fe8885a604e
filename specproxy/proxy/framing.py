"""Request bodies in an unusual shape, which only chunked or encoded requests need.

- ``chunked_end`` finds where a chunked body ends in the bytes read (``httptools`` has
  decoded it already; the server needs the boundary to serve what a client pipelined
  behind it);
- ``decode_body`` undoes a request's ``Content-Encoding`` (gzip and deflate, as aiohttp's
  server decodes them; any other coding leaves the bytes as they are, as aiohttp's does),
  bounded by the body limit after decoding, so a small compressed body cannot grow past
  it.
"""

from __future__ import annotations

import zlib


class Undecodable(Exception):
    """The body does not decode with its Content-Encoding (or the encoding is not taken)."""


class DecodedTooLarge(Exception):
    """The decoded body is over the limit."""


def chunked_end(data: bytes, start: int) -> int | None:
    """The index just past the chunked body that begins at ``data[start]`` (its last chunk,
    its trailers and their blank line); None when ``data`` does not hold one whole."""
    at = start
    while True:
        eol = data.find(b"\r\n", at)
        if eol < 0:
            return None
        try:
            size = int(data[at:eol].split(b";", 1)[0].strip(b" \t"), 16)
        except ValueError:
            return None
        at = eol + 2
        if size == 0:
            break
        at += size + 2
    while True:  # trailers, to the blank line
        eol = data.find(b"\r\n", at)
        if eol < 0:
            return None
        if eol == at:
            return eol + 2
        at = eol + 2


def decode_body(body: bytes, encoding: str, limit: int) -> bytes:
    """``body`` with its ``Content-Encoding`` undone, at most ``limit`` bytes.

    Raises ``Undecodable`` (gzip or deflate bytes that do not decode whole) or
    ``DecodedTooLarge``. Any other coding (``br``, several, an unknown name) leaves the
    bytes as they are: a body that then does not parse is the route's own 400."""
    name = encoding.strip().lower()
    if name in ("", "identity") or not body:  # (no body: nothing to decode)
        return body
    if name in ("gzip", "x-gzip"):
        wbits = 16 + zlib.MAX_WBITS
    elif name == "deflate":  # zlib-wrapped, or raw deflate as some clients send it
        wbits = zlib.MAX_WBITS if body[:1] and body[0] & 0x0F == 8 else -zlib.MAX_WBITS
    else:  # a coding not taken: the bytes as they are (as aiohttp's server passes them on)
        return body
    inflate = zlib.decompressobj(wbits)
    try:
        out = inflate.decompress(body, limit + 1)
    except zlib.error as exc:
        raise Undecodable(name) from exc
    if len(out) > limit:
        raise DecodedTooLarge
    if not inflate.eof or inflate.unused_data:
        raise Undecodable(name)
    return out
