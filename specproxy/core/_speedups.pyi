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
