"""Renderer-neutral building blocks of a report document: tables and sections."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Table:
    """A table of preformatted cells; every row has as many cells as ``headers``."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.headers):
                raise ValueError(f"row {row!r} does not match headers {self.headers!r}")


@dataclass(frozen=True, slots=True)
class Section:
    """A titled run of paragraphs and tables; ``key`` lets the HTML renderer add figures."""

    key: str
    title: str
    blocks: tuple[str | Table, ...]
