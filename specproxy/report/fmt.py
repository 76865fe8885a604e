"""Number formatting shared by every renderer (units shown, never implied)."""

from __future__ import annotations

import math

from specproxy.core.records.tally import format_ms
from specproxy.core.statistics.stats import CONFIDENCE, Interval

DASH = "–"


def ms(value_us: float | None) -> str:
    """Microseconds as milliseconds (``core.records.tally.format_ms``, which the replay prints too)."""
    return format_ms(value_us, DASH)


def _value(x: float) -> str:
    """A ratio or interval end; a failure counted as the worst case reads ``inf``."""
    return "inf" if math.isinf(x) else f"{x:.3f}"


def shows_interval(iv: Interval) -> bool:
    """An interval is shown only where it reaches the 95% its column header names and
    rests on at least two units of replication."""
    return iv.confidence >= CONFIDENCE - 1e-9 and (iv.units is None or iv.units >= 2)


def units(iv: Interval | None) -> str:
    """``8 block pairs``: what an interval rests on (empty for independent observations)."""
    if iv is None or iv.units is None:
        return ""
    return f"{iv.units} {iv.unit or 'unit'}{'' if iv.units == 1 else 's'}"


def ratio(iv: Interval | None) -> str:
    """``point [low, high]``; below 95% (too few values) or under two units of replication,
    the point and why, no interval."""
    if iv is None:
        return DASH
    if iv.units is not None and iv.units < 2:
        return f"{_value(iv.point)} ({units(iv)}: too few for a 95% interval)"
    if not shows_interval(iv):
        return f"{_value(iv.point)} (n={iv.n}: too few for a 95% interval)"
    return f"{_value(iv.point)} [{_value(iv.low)}, {_value(iv.high)}]"


def level(iv: Interval | None) -> str:
    """The confidence an interval really reaches (order statistics reach at least 95%)."""
    if iv is None:
        return DASH
    return f"{iv.confidence * 100:.1f}%"


def pct(value: float | None, digits: int = 1) -> str:
    if value is None or math.isnan(value):
        return DASH
    return f"{value * 100:.{digits}f}%"


def num(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return DASH
    return f"{value:.{digits}f}"


def count(value: int | None) -> str:
    return DASH if value is None else f"{value:,}"


def change(iv: Interval | None) -> str:
    """A ratio as a plain-language change: ``18.8% faster`` / ``4.1% slower``."""
    if iv is None:
        return DASH
    if math.isinf(iv.point):
        return "most pairs: candidate failed"
    delta = 1.0 - iv.point
    if round(abs(delta) * 100, 1) == 0.0:
        return "no change"
    return f"{abs(delta) * 100:.1f}% {'faster' if delta > 0 else 'slower'}"


LITTLE_ACTIVITY_S = 10.0
"""A throughput (tokens/s, requests/s) over less active time than this says how little."""


def activity(active_s: float | None) -> str:
    """`` (over 1.4 s of activity)`` for a rate that rests on under ``LITTLE_ACTIVITY_S`` of
    activity (one burst can then move it a lot); empty otherwise."""
    if active_s is None or active_s >= LITTLE_ACTIVITY_S:
        return ""
    return f" (over {active_s:.1f} s of activity)"
