"""``serve --record``: a replayable trace of live traffic, in specproxy's native JSONL.

Owns ``RUN_DIR/trace.jsonl``. One line per client request, appended when the primary's
answer completes (so lines are in completion order; ``specproxy replay`` sorts by ``t``).
``t`` is the request's arrival at the proxy, in seconds since the proxy started. With
``serve --workers N`` each worker appends to its own shard (``trace.wK.jsonl``) on the
run's one clock, and the parent merges the shards into ``trace.jsonl`` in arrival order
when the workers have stopped (``merge_trace_shards``).

Without ``--record-text`` no prompt text is written: a line carries the token lengths
the primary server reported (``input_tokens``/``output_tokens``), so a replay
synthesises prompts of the same lengths; a request whose lengths are unknown (it
failed before usage arrived) is counted in ``skipped`` instead. With ``--record-text``
the line carries the client's own request body, so a replay sends the same requests, and
(mirror mode) ``x_pair_id``, the pair id of the request's records, so ``specproxy score`` can
find the prompt each recorded output answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from specproxy.core.records.model import Measurement, Route
from specproxy.core.records.runfiles import trace_name

_US = 1_000_000


class TraceRecorder:
    """Appends one native trace line per completed client request (see the module docstring)."""

    def __init__(self, path: Path, *, keep_text: bool) -> None:
        self.path = path
        self._keep_text = keep_text
        self._fh = path.open("ab")
        self.written = 0
        self.skipped = 0

    def observe(
        self,
        route: Route,
        stream: bool,
        arrived_us: int,
        client_body: Mapping[str, Any] | None,
        m: Measurement,
        *,
        pair_id: str | None = None,
    ) -> None:
        """Append the line for one completed request, or count it as skipped."""
        line = self.line(route, stream, arrived_us, client_body, m)
        if line is not None and pair_id is not None and self._keep_text:
            line["x_pair_id"] = pair_id
        if line is None:
            self.skipped += 1
            return
        self._fh.write(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))
        self._fh.flush()
        self.written += 1

    def line(
        self,
        route: Route,
        stream: bool,
        arrived_us: int,
        client_body: Mapping[str, Any] | None,
        m: Measurement,
    ) -> dict[str, Any] | None:
        """The trace line for one request, or None when it cannot be replayed faithfully.

        ``client_body`` is the client's JSON object as the proxy parsed it (None when
        the caller kept none).
        """
        t = round(arrived_us / _US, 6)
        if self._keep_text:
            if client_body is None:
                return None
            return {"t": t, "route": route.value, "body": client_body}
        if not m.prompt_tokens or not m.completion_tokens:
            return None
        return {
            "t": t,
            "input_tokens": m.prompt_tokens,
            "output_tokens": m.completion_tokens,
            "x_route": route.value,
            "x_stream": stream,
        }

    def close(self) -> None:
        self._fh.close()


def merge_trace_shards(run_dir: Path, paths: list[Path]) -> int:
    """``serve --workers N --record``: the workers' trace shards (``paths``) into one
    ``RUN_DIR/trace.jsonl``, in arrival order (``t``, on the run's one clock), then the
    shards removed; returns the number of lines. A shard's last line cut off mid-write (a
    worker killed) is left out; any other line that is not a trace line raises
    (``ValueError``, ``KeyError`` or ``TypeError``) and nothing is merged or removed."""
    lines: list[tuple[float, bytes]] = []
    for path in paths:
        *whole, _cut_off = path.read_bytes().split(b"\n")  # empty when the file ends whole
        lines.extend((float(orjson.loads(raw)["t"]), raw) for raw in whole if raw.strip())
    lines.sort(key=lambda line: line[0])
    target = run_dir / trace_name()
    partial = target.with_suffix(".jsonl.tmp")
    partial.write_bytes(b"".join(raw + b"\n" for _, raw in lines))
    partial.replace(target)
    for path in paths:
        path.unlink()
    return len(lines)
