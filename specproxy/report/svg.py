"""A tiny inline-SVG chart drawer: line, step, scatter, bar and interval charts with labelled axes.

No JavaScript, no external resources, no ``xmlns`` URL (inline SVG in HTML5 needs
none), so the page renders offline and contains no address. Coordinates are rounded to
0.1 px to keep the page small. Every text is escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 28, 44
COLORS = {"baseline": "#1f6fb4", "candidate": "#d2452d"}
_FALLBACK = ("#2a9d55", "#8c5bb5", "#c98a14", "#555555")


@dataclass(frozen=True, slots=True)
class Series:
    """One named series; ``kind`` is ``line``, ``step`` or ``scatter``."""

    name: str
    points: tuple[tuple[float, float], ...]
    kind: str = "line"

    def __post_init__(self) -> None:
        if self.kind not in ("line", "step", "scatter"):
            raise ValueError(f"unknown series kind {self.kind!r}")


def color(name: str, index: int) -> str:
    return COLORS.get(name, _FALLBACK[index % len(_FALLBACK)])


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 5 x 10^k steps) covering ``[low, high]``."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        if value >= low - step * 1e-9:
            ticks.append(round(value, 12))
        value += step
    return ticks


MIN_TICKS = 3
_LOG_MANTISSAS = ((1, 2, 5), (1, 2, 3, 5), (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9))


def log_ticks(low: float, high: float) -> list[float]:
    """Ticks within ``[low, high]`` (both > 0): 1, 2, 5 x 10^k, denser mantissas when that
    gives fewer than ``MIN_TICKS`` (300-950 gets 300, 400, ... 900, not a lone 500), and
    evenly spaced nice values for a range narrower than that."""
    ticks: list[float] = []
    for mantissas in _LOG_MANTISSAS:
        ticks = []
        for k in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
            ticks += [round(m * 10.0**k, 12) for m in mantissas if low <= m * 10.0**k <= high]
        if len(ticks) >= MIN_TICKS:
            return ticks
    fitted = [t for t in nice_ticks(low, high) if t > 0]
    return fitted if len(fitted) >= len(ticks) else ticks


def short(value: float) -> str:
    if value != 0 and (abs(value) >= 10000 or abs(value) < 0.01):
        return f"{value:.0e}" if abs(value) >= 10000 else f"{value:.1e}"
    return f"{value:g}"


class _Frame:
    """Maps data to pixels for one chart."""

    def __init__(self, xs: Sequence[float], ys: Sequence[float], *, log_x: bool) -> None:
        self.log_x = log_x and min(xs) > 0
        self.x0, self.x1 = self._span([self._fx(x) for x in xs])
        self.y0, self.y1 = self._span(ys, zero=True)

    def _fx(self, x: float) -> float:
        return math.log10(x) if self.log_x else x

    @staticmethod
    def _span(values: Sequence[float], zero: bool = False) -> tuple[float, float]:
        lo, hi = min(values), max(values)
        if zero and lo > 0:
            lo = 0.0
        if hi <= lo:
            hi = lo + (abs(lo) or 1.0)
        return lo, hi

    def px(self, x: float) -> float:
        plot_w = WIDTH - LEFT - RIGHT
        return LEFT + (self._fx(x) - self.x0) / (self.x1 - self.x0) * plot_w

    def py(self, y: float) -> float:
        plot_h = HEIGHT - TOP - BOTTOM
        return HEIGHT - BOTTOM - (y - self.y0) / (self.y1 - self.y0) * plot_h


_AXIS_LINES = (
    f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" stroke="#444"/>',
    f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" stroke="#444"/>',
)
_NO_DATA = f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">no data</text>'


def _axis_labels(x_label: str, y_label: str) -> list[str]:
    return [
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - 8}" text-anchor="middle">{html.escape(x_label)}</text>',
        f'<text transform="translate(14,{(TOP + HEIGHT - BOTTOM) / 2:.0f}) rotate(-90)" text-anchor="middle">{html.escape(y_label)}</text>',
    ]


def _axes(frame: _Frame, x_label: str, y_label: str) -> list[str]:
    out = list(_AXIS_LINES)
    xt = log_ticks(10**frame.x0, 10**frame.x1) if frame.log_x else nice_ticks(frame.x0, frame.x1)
    for t in xt:
        x = frame.px(t)
        out.append(
            f'<line x1="{x:.1f}" y1="{HEIGHT - BOTTOM}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM + 4}" stroke="#444"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{short(t)}</text>'
        )
    for t in nice_ticks(frame.y0, frame.y1):
        y = frame.py(t)
        out.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#eee"/>'
        )
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{short(t)}</text>')
    return out + _axis_labels(x_label, y_label)


def _draw(series: Series, frame: _Frame, stroke: str) -> str:
    pts = [(frame.px(x), frame.py(y)) for x, y in series.points]
    if series.kind == "scatter":
        return "".join(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{stroke}" fill-opacity="0.45"/>'
            for x, y in pts
        )
    if series.kind == "step":
        stepped: list[tuple[float, float]] = []
        for i, (x, y) in enumerate(pts):
            if i:
                stepped.append((x, stepped[-1][1]))
            stepped.append((x, y))
        pts = stepped
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
    return f'<polyline points="{path}" fill="none" stroke="{stroke}" stroke-width="1.6"/>'


def _title_end(title: str) -> float:
    """Where the bold 13 px title ends (an estimate: 7.2 px a character)."""
    return LEFT + len(title) * 7.2


def _legend(names: Sequence[str], title: str = "") -> list[str]:
    """Horizontal legend in the title band, right-aligned, so it never covers data; when
    the title would run into it, the legend takes the band's lower half instead and the
    title its upper half (the two never overlap)."""
    width = sum(16 + int(len(name) * 6.5) + 10 for name in names)
    low = _title_end(title) > WIDTH - RIGHT - width
    box_y, text_y = (16, 25) if low else (8, 17)
    out = []
    x = WIDTH - RIGHT
    for i, name in reversed(list(enumerate(names))):
        x -= 16 + int(len(name) * 6.5) + 10
        out.append(f'<rect x="{x}" y="{box_y}" width="10" height="9" fill="{color(name, i)}"/>')
        out.append(f'<text x="{x + 14}" y="{text_y}">{html.escape(name)}</text>')
    return out


@dataclass(frozen=True, slots=True)
class Band:
    """Vertical interval bars ``(x, low, high)`` drawn in the colour of series ``name``."""

    name: str
    bars: tuple[tuple[float, float, float], ...]


def _bands(bands: Sequence[Band], names: Sequence[str], frame: _Frame) -> list[str]:
    out = []
    for band in bands:
        index = names.index(band.name) if band.name in names else 0
        stroke = color(band.name, index)
        for x, low, high in band.bars:
            px, y0, y1 = frame.px(x), frame.py(low), frame.py(high)
            out.append(
                f'<path d="M{px - 3:.1f},{y0:.1f}H{px + 3:.1f}M{px:.1f},{y0:.1f}V{y1:.1f}'
                f'M{px - 3:.1f},{y1:.1f}H{px + 3:.1f}" stroke="{stroke}" fill="none"/>'
            )
    return out


def _vlines(vlines: Sequence[tuple[float, str]], frame: _Frame) -> list[str]:
    out = []
    for x, label in vlines:
        px = frame.px(x)
        out.append(
            f'<line x1="{px:.1f}" y1="{TOP}" x2="{px:.1f}" y2="{HEIGHT - BOTTOM}" stroke="#c0392b" stroke-dasharray="3 3"/>'
            f'<text x="{px + 3:.1f}" y="{TOP + 12}" fill="#c0392b">{html.escape(label)}</text>'
        )
    return out


def chart(
    title: str,
    series: Sequence[Series],
    *,
    x_label: str,
    y_label: str,
    log_x: bool = False,
    hline: float | None = None,
    bands: Sequence[Band] = (),
    vlines: Sequence[tuple[float, str]] = (),
    spans: Sequence[tuple[float, float, str]] = (),
) -> str:
    """One chart as an ``<svg>`` element; empty series are skipped (a note when all are).

    ``log_x`` draws x on a log scale when every x is > 0 (and only then adds
    "(log scale)" to ``x_label``); ``bands`` adds interval bars; ``vlines`` marks x
    positions with a label (e.g. a crossover); ``spans`` are ``(x0, x1, series name)``
    ranges shaded in that series' colour behind the data (alternate-mode blocks).
    """
    drawn = [s for s in series if s.points]
    if not drawn:
        return _open(title) + _NO_DATA + "</svg>"
    parts = [_open(title)]
    xs = [x for s in drawn for x, _ in s.points] + [x for x, _ in vlines]
    ys = [y for s in drawn for _, y in s.points] + ([hline] if hline is not None else [])
    ys += [v for b in bands for _, low, high in b.bars for v in (low, high)]
    frame = _Frame(xs, ys, log_x=log_x)
    parts += _spans(frame, spans, [s.name for s in drawn])
    parts += _axes(frame, f"{x_label} (log scale)" if frame.log_x else x_label, y_label)
    if hline is not None:
        y = frame.py(hline)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#888" stroke-dasharray="4 3"/>'
        )
    parts += [_draw(s, frame, color(s.name, i)) for i, s in enumerate(drawn)]
    parts += _bands(bands, [s.name for s in drawn], frame) + _vlines(vlines, frame)
    parts += _legend([s.name for s in drawn], title)
    return "".join(parts) + "</svg>"


def _spans(frame: _Frame, spans: Sequence[tuple[float, float, str]], names: list[str]) -> list[str]:
    out = []
    left, right = frame.px(10**frame.x0 if frame.log_x else frame.x0), WIDTH - RIGHT
    for x0, x1, name in spans:
        a, b = max(frame.px(x0), left), min(frame.px(x1), right)
        if b > a:
            fill = color(name, names.index(name) if name in names else 0)
            out.append(
                f'<rect x="{a:.1f}" y="{TOP}" width="{b - a:.1f}" height="{HEIGHT - TOP - BOTTOM}"'
                f' fill="{fill}" fill-opacity="0.08"><title>{html.escape(name)}</title></rect>'
            )
    return out


def intervals(
    title: str,
    rows: Sequence[tuple[str, float, float, float]],
    *,
    x_label: str,
    y_label: str,
    hline: float | None = 1.0,
) -> str:
    """Points with interval bars over labelled categories: ``(label, point, low, high)``.

    Infinite ends (a failure counted as the worst case) are drawn to the frame's edge.
    """
    finite = [v for _, p, lo, hi in rows for v in (p, lo, hi) if math.isfinite(v)]
    if not rows or not finite:
        return _open(title) + _NO_DATA + "</svg>"
    ys = finite + ([hline] if hline is not None else [])
    frame = _Frame([0.0, float(len(rows))], ys, log_x=False)
    lo_y, hi_y = min(ys), max(ys)
    pad = (hi_y - lo_y) * 0.08 or 0.05
    frame.y0, frame.y1 = lo_y - pad, hi_y + pad
    parts = [_open(title), *_AXIS_LINES]
    for t in nice_ticks(frame.y0, frame.y1):
        y = frame.py(t)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#eee"/>'
        )
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{short(t)}</text>')
    if hline is not None:
        y = frame.py(hline)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#888" stroke-dasharray="4 3"/>'
        )
    width = (WIDTH - LEFT - RIGHT) / len(rows)
    every = max(1, len(rows) // 12)

    def clamp(v: float) -> float:
        return frame.py(min(max(v, frame.y0), frame.y1)) if math.isfinite(v) else frame.py(frame.y1)

    for i, (label, point, low, high) in enumerate(rows):
        x = LEFT + (i + 0.5) * width
        stroke = COLORS["candidate"]
        parts.append(
            f'<line x1="{x:.1f}" y1="{clamp(low):.1f}" x2="{x:.1f}" y2="{clamp(high):.1f}" stroke="{stroke}" stroke-width="2"/>'
        )
        parts.append(f'<circle cx="{x:.1f}" cy="{clamp(point):.1f}" r="4" fill="{stroke}"/>')
        if i % every == 0:
            parts.append(
                f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{html.escape(label)}</text>'
            )
    return "".join(parts + _axis_labels(x_label, y_label)) + "</svg>"


def bars(title: str, values: Sequence[tuple[str, float]], *, x_label: str, y_label: str) -> str:
    """A bar chart of labelled values (e.g. a histogram)."""
    if not values:
        return _open(title) + _NO_DATA + "</svg>"
    frame = _Frame([0.0, float(len(values))], [v for _, v in values], log_x=False)
    parts = [_open(title), *_AXIS_LINES]
    parts += [
        f'<text x="{LEFT - 6}" y="{frame.py(t) + 4:.1f}" text-anchor="end">{short(t)}</text>'
        for t in nice_ticks(frame.y0, frame.y1)
    ]
    width = (WIDTH - LEFT - RIGHT) / len(values)
    every = max(1, len(values) // 12)
    for i, (label, value) in enumerate(values):
        x, y = LEFT + i * width, frame.py(value)
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{max(width - 2, 1):.1f}" height="{HEIGHT - BOTTOM - y:.1f}" fill="{COLORS["candidate"]}"/>'
        )
        if i % every == 0:
            parts.append(
                f'<text x="{x + width / 2:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{html.escape(label)}</text>'
            )
    return "".join(parts + _axis_labels(x_label, y_label)) + "</svg>"


def _open(title: str) -> str:
    return (
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'font-family="sans-serif" font-size="11"><title>{html.escape(title)}</title>'
        f'<text x="{LEFT}" y="13" font-size="13" font-weight="bold">{html.escape(title)}</text>'
    )
