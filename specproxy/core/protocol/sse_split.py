"""A stream of one-line ``data:`` events split whole, at the end of the response: the
events the incremental decoder (``core.protocol.sse``) would have returned, with the time of the
read that completed each, for ``core.measurement.measure.measure_recorded``.

Pure. Every SGLang and OpenAI stream is of this shape; any other stream (a CR, padding,
comments, other fields, a BOM, a block of several lines) is refused (None) and decoded
read by read instead. ``simple_events`` runs in C where ``core.speedups`` has it
(``core/_speedups.c``); ``simple_events_py`` is its reference.
"""

from __future__ import annotations

from itertools import accumulate, chain, repeat
from operator import rshift, sub

from specproxy.core.speedups import SPEEDUPS

_C_SIMPLE_EVENTS = SPEEDUPS.simple_events if SPEEDUPS is not None else None


def simple_events(chunks: list[tuple[int, bytes]]) -> list[tuple[int, str]] | None:
    """``simple_events_py`` (the reference), in C where ``core.speedups`` has it."""
    if _C_SIMPLE_EVENTS is not None and type(chunks) is list:
        found: list[tuple[int, str]] | None = _C_SIMPLE_EVENTS(chunks)
        return found
    return simple_events_py(chunks)


def simple_events_py(chunks: list[tuple[int, bytes]]) -> list[tuple[int, str]] | None:
    """The data field of each event of a stream of one-line ``data: `` blocks, with the time
    of the read that completed it; None for any other stream (a CR, padding, comments, other fields, a
    leading BOM, a block of several lines, an unterminated last block).

    The incremental decoder (``core.protocol.sse``) returns the same events: such a block ends at
    its ``\n\n``, and the decoder completes it with the read holding that ``\n\n``'s
    second byte. The body is checked and split whole, with C-level operations only: it
    is such a stream exactly when it starts with ``data: ``, ends with ``\n\n`` and
    holds no ``\n`` but those of the k ``\n\ndata: `` between its k + 1 blocks and the
    final pair. Its ``\n`` then come in pairs, one per block, so the blocks completed by
    the end of a read are half the ``\n`` read so far, rounded down. When every read
    ends with ``\n\n`` and the body holds two ``\n`` per read (the commonest stream: one
    event per read), each read completed exactly one block, and its time is that block's.
    """
    reads = [data for _, data in chunks]
    body = b"".join(reads)
    if not body:
        return []
    newlines = body.count(b"\n")
    if (
        b"\r" in body
        or not body.startswith(b"data: ")
        or not body.endswith(b"\n\n")
        or newlines != 2 * (body.count(b"\n\ndata: ") + 1)
    ):
        return None
    # Decoded whole: a "\n" ends any malformed UTF-8 sequence, so each block decodes
    # (each malformed sequence replaced) exactly as it would alone.
    fields = body.decode("utf-8", errors="replace")[6:-2].split("\n\ndata: ")
    stamps = [t_us for t_us, _ in chunks]
    if newlines == 2 * len(reads) and all(map(bytes.endswith, reads, repeat(b"\n\n"))):
        return list(zip(stamps, fields, strict=True))  # the commonest: a read per event
    completed = list(map(rshift, accumulate(map(bytes.count, reads, repeat(b"\n"))), repeat(1)))
    per_read = map(sub, completed, chain((0,), completed))  # blocks each read completed
    times = chain.from_iterable(map(repeat, stamps, per_read))
    return list(zip(times, fields, strict=True))
