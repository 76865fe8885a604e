"""The fields of a request record's dict that the report's columns read (``core.records.columns``):
their order, the defaults of those a record may leave out, and the checks
``RequestRecord.from_dict`` makes on the ones the columns neither keep nor code.

Pure. ``read_fields`` gives a record's values in one tuple, one C-level ``itemgetter`` call
for a record that has every field; the defaults are filled in only for one that has not.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from specproxy.core.records.model import Route

ROUTES = frozenset(r.value for r in Route)
_REQUIRED_NAMES = (
    "experiment_id", "request_id", "side", "route", "stream", "backend_url", "sent_at_unix_s",
    "actual_send_us",
)  # fmt: skip
_DEFAULTS: dict[str, Any] = {
    "warmup": False, "error_kind": None, "mode": None, "category": None, "e2e_us": None,
    "ttft_us": None, "tpot_us": None, "headers_us": None, "completion_tokens": None,
    "intended_send_us": None, "in_flight_at_send": 0, "acceptance": None, "labels": None,
    "pair_id": None, "output_sha256": None, "output_text": None,
    "chunk_tokens_estimated": False, "prompt_tokens": None,
}  # fmt: skip
_REQUIRED = itemgetter(*_REQUIRED_NAMES)
_FIELDS = itemgetter(*_REQUIRED_NAMES, *_DEFAULTS)
"""A record's values: the required names, then the defaulted ones, in that order."""


def read_fields(data: dict[str, Any]) -> tuple[Any, ...]:
    """``data``'s values of the required names, then of the defaulted ones (a default for
    each it leaves out); KeyError naming a missing required field."""
    fields: tuple[Any, ...]
    try:
        fields = _FIELDS(data)
    except KeyError:
        _REQUIRED(data)
        fields = _FIELDS({**_DEFAULTS, **data})
    return fields


def check_fields(route: Any, request_id: Any, load: Any, *latencies: Any) -> None:
    """What ``RequestRecord`` refuses among the fields the columns do not keep or code."""
    if route not in ROUTES:
        raise ValueError(f"{route!r} is not a valid route")
    if not request_id:
        raise ValueError("request_id must not be empty")
    if load < 0:
        raise ValueError("in_flight_at_send must be >= 0")
    for name, value in zip(("e2e_us", "ttft_us", "tpot_us", "headers_us"), latencies, strict=True):
        if value is not None and value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
