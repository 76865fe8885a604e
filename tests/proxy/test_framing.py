"""Request bodies in an unusual shape (``proxy.framing``): where a chunked body ends, and a
``Content-Encoding`` undone within the body limit."""

from __future__ import annotations

import gzip
import zlib

import pytest

from specproxy.proxy.framing import DecodedTooLarge, Undecodable, chunked_end, decode_body


@pytest.mark.parametrize(
    ("body", "end"),
    [
        (b"5\r\nhello\r\n0\r\n\r\n", 15),
        (b"5;ext=1\r\nhello\r\n2\r\n, \r\n0\r\n\r\n", 28),
        (b"0\r\nX-Trailer: 1\r\n\r\n", 19),
        (b"5\r\nhello\r\n0\r\n\r\nPOST /next", 15),  # what follows is the next request's
        (b"5\r\nhello\r\n0\r\n", None),  # the last chunk's blank line has not come
        (b"5\r\nhel", None),
        (b"zz\r\n", None),
    ],
)
def test_chunked_end_finds_the_end_of_a_chunked_body(body: bytes, end: int | None) -> None:
    head = b"POST / HTTP/1.1\r\n\r\n"
    found = chunked_end(head + body, len(head))
    assert found == (None if end is None else len(head) + end)


@pytest.mark.parametrize(
    ("encoding", "pack"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("Deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as some clients send it
        ("identity", lambda b: b),
        ("", lambda b: b),
    ],
)
def test_a_body_is_decoded_by_its_content_encoding(encoding: str, pack: object) -> None:
    body = b'{"messages": []}' * 50
    assert decode_body(pack(body), encoding, 1 << 20) == body  # type: ignore[operator]


@pytest.mark.parametrize(
    ("encoding", "data"),
    [
        ("gzip", b"not compressed"),
        ("gzip", gzip.compress(b"x" * 100)[:-6]),  # cut short
        ("gzip", gzip.compress(b"x") + b"more"),  # bytes after its end
        ("deflate", b"x\x9c not deflate"),
    ],
)
def test_a_body_that_does_not_decode_whole_is_undecodable(encoding: str, data: bytes) -> None:
    with pytest.raises(Undecodable):
        decode_body(data, encoding, 1 << 20)


@pytest.mark.parametrize("encoding", ["br", "gzip, deflate", "compress", "x-unknown"])
def test_a_coding_not_taken_leaves_the_bytes_as_they_are(encoding: str) -> None:
    """As aiohttp's server does: the route then reads the bytes as sent (a JSON route
    refuses bytes that are not JSON, its own 400)."""
    data = gzip.compress(b"{}")
    assert decode_body(data, encoding, 1 << 20) == data


def test_a_small_body_that_decodes_past_the_limit_is_too_large() -> None:
    bomb = gzip.compress(b"\0" * (8 << 20))  # 8 MiB of zeros in about 8 kB
    assert len(bomb) < 64 << 10
    with pytest.raises(DecodedTooLarge):
        decode_body(bomb, "gzip", 1 << 20)
    assert decode_body(bomb, "gzip", 8 << 20) == b"\0" * (8 << 20)
