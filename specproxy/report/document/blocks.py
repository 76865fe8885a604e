"""Renderer-neutral building blocks of a report document: badges, tables and sections."""

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
class Badge:
    """A verdict shown as a badge: ``kind`` (the verdict's value), its ``label``, the
    supporting ``text`` and a ``tag`` such as SIMULATED (empty for none)."""

    kind: str
    label: str
    text: str
    tag: str = ""

    @property
    def line(self) -> str:
        tag = f" ({self.tag})" if self.tag else ""
        return f"Verdict{tag}: {self.label}: {self.text}"


@dataclass(frozen=True, slots=True)
class Section:
    """A titled run of paragraphs and tables; ``key`` lets the HTML renderer add figures."""

    key: str
    title: str
    blocks: tuple[str | Table | Badge, ...]
