"""What sampling the clients asked for, tallied for experiment.json.

The proxy does not choose sampling: clients do, per request. Output agreement between
the two sides is only meaningful for greedy requests, so the proxy counts the
temperatures it saw (``default`` when a request named none: the server's default,
1.0 on SGLang) and records ``greedy: true`` only when every request was greedy.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from specproxy.core.records.model import Route


def requested_temperature(route: Route, obj: Any) -> str:
    """The request's temperature as a label: a number's text, or ``default``."""
    if not isinstance(obj, dict):
        return "default"
    source = obj.get("sampling_params") if route is Route.GENERATE else obj
    value = source.get("temperature") if isinstance(source, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "default"
    return f"{float(value):g}"


class SamplingTally:
    """Counts of the temperatures clients asked for."""

    def __init__(self) -> None:
        self._temperatures: Counter[str] = Counter()

    def observe(self, route: Route, obj: Any) -> None:
        self._temperatures[requested_temperature(route, obj)] += 1

    def counts(self) -> dict[str, int]:
        """Requests per temperature label (what a worker hands its parent)."""
        return dict(self._temperatures)

    def add_counts(self, counts: dict[str, int]) -> None:
        """Add another tally's ``counts()`` (the parent of ``serve --workers N`` sums them)."""
        self._temperatures.update(counts)

    def to_dict(self) -> dict[str, Any]:
        seen = dict(self._temperatures)
        greedy: bool | None = None
        if seen:
            greedy = set(seen) == {"0"}
        only = next(iter(seen)) if len(seen) == 1 else None
        temperature = float(only) if only not in (None, "default") else None
        return {
            "source": "clients",
            "temperatures": seen,
            "temperature": temperature,
            "greedy": greedy,
        }
