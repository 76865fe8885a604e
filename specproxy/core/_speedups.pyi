from collections.abc import Callable
from typing import Any

def take_plain_chat(
    events: list[tuple[int, str]],
    start: int,
    offsets: list[int],
    pieces: list[str] | None,
    loads: Callable[[str], Any],
    decode_error: type[Exception],
    /,
) -> tuple[int, list[str] | None]: ...

class ChunkWriter:
    def __init__(
        self, transport: Any, slow: Callable[[bytes], None], tail: bytes | None, high_water: int
    ) -> None: ...
    def __call__(self, data: bytes, /) -> None: ...

def simple_events(chunks: list[tuple[int, bytes]], /) -> list[tuple[int, str]] | None: ...
def hdr_add(
    counts: Any,
    pairs: list[tuple[int, int]],
    mask: int,
    low: int,
    shift: int,
    unit: int,
    half: int,
    highest: int,
    /,
) -> tuple[int, int, int] | None: ...
def bucket_counts(pairs: object, bounds: list[float], /) -> tuple[dict[int, int], float] | None: ...
def pooled_kth(
    groups: list[list[float]], weights: list[int], merged: list[float], k: int, /
) -> float | None: ...
def cut_chunk_arrays(raw: bytes, /) -> tuple[bytes, int, int, bool] | None: ...
def window_runs(
    raw: bytes, base: float, scale: float, last: int, /
) -> list[tuple[int, int]] | None: ...
