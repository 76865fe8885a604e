"""What sampling the clients asked for, tallied for experiment.json.

The proxy does not choose sampling: clients do, per request. Output agreement between
the two sides is only meaningful for greedy requests, so the proxy counts the
temperatures it saw (``default`` when a request named none: the server's default,
1.0 on SGLang) and records ``greedy: true`` only when every request was greedy.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


class SamplingTally(Counter[str]):
    """Requests per temperature label (``core.protocol.shaping.requested_temperature``),
    counted by ``proxy.lean.proxied_request`` as a ``Counter``'s items are."""

    def counts(self) -> dict[str, int]:
        """Requests per temperature label (what a worker hands its parent)."""
        return dict(self)

    def add_counts(self, counts: dict[str, int]) -> None:
        """Add another tally's ``counts()`` (the parent of ``serve --workers N`` sums them)."""
        self.update(counts)

    def to_dict(self) -> dict[str, Any]:
        seen = dict(self)
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
