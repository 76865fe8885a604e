"""CPU cost of the end-of-stream fold: ``measure_recorded`` per response.

Not a test: prints figures. The relay keeps every upstream read as ``(t_us, bytes)``
and folds the whole response into its Measurement once, at the end
(``core.measurement.measure.measure_recorded``); this measures that call on real SGLang 0.5.16
stream captures split at their recorded socket reads, and on a simulator-like chat
stream (a role chunk, 32 content events, a finish chunk, a usage chunk, ``[DONE]``; one
event per read). Times are CPU seconds of this process (``time.process_time``), the best
of ``--rounds`` rounds, so that other work on a shared machine inflates them as little
as possible.

Usage: ``python bench/fold_speed.py [--repeat 200] [--rounds 15]`` from the repository root.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

# the checkout's own specproxy first (compiled_fold.sh runs this in a compiled copy)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from meter_speed import best_cpu_s

from specproxy.core.measurement.measure import measure_recorded
from specproxy.core.records.model import Route
from specproxy.testing.captures import sglang_exchange

CASES = (
    ("run_a_init0.1/base", "chat_stream_usage", Route.CHAT),
    ("run_a_init0.1/base", "chat_stream_no_usage", Route.CHAT),
    ("run_a_init0.1/base", "completions_stream_usage", Route.COMPLETIONS),
    ("run_a_init0.1/sa_copy", "generate_stream", Route.GENERATE),
)


def _capture_reads(server: str, name: str) -> list[tuple[int, bytes]]:
    """A capture's body split at its recorded socket reads, stamped with their times."""
    entry, cap = sglang_exchange(server, name)
    reads: list[tuple[int, bytes]] = []
    sent = 0
    for seconds, raw_so_far, _count in entry["recv_timings"]:
        upto = cap.body_bytes_before(raw_so_far)
        if upto > sent:
            reads.append((round(seconds * 1_000_000), cap.body[sent:upto]))
            sent = upto
    return reads


def _event(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _simulated_chat(events: int = 32) -> list[tuple[int, bytes]]:
    """A chat stream shaped like the simulator's, one event per read, 20 ms apart."""
    head = {"id": "abc123", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
        choice = {
            "index": 0,
            "delta": {"reasoning_content": None, **delta},
            "logprobs": None,
            "finish_reason": finish,
            "matched_stop": None,
        }
        return {**head, "choices": [choice]}

    body = [_event(chunk({"role": "assistant", "content": ""}))]
    body += [_event(chunk({"content": f" word{i} and"})) for i in range(events)]
    body.append(_event(chunk({}, "stop")))
    usage = {"prompt_tokens": 12, "completion_tokens": 3 * events, "total_tokens": 12 + 3 * events}
    body.append(_event({**head, "choices": [], "usage": usage}))
    body.append(b"data: [DONE]\n\n")
    return [(20_000 * (i + 1), data) for i, data in enumerate(body)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    streams = [(f"{s}/{n}", route, _capture_reads(s, n)) for s, n, route in CASES]
    streams.append(("simulated chat, 32 content events", Route.CHAT, _simulated_chat()))
    for label, route, reads in streams:
        end_us = reads[-1][0] + 1

        def fold_once(
            route: Route = route, reads: list[tuple[int, bytes]] = reads, end_us: int = end_us
        ) -> None:
            measure_recorded(route, True, status=200, headers_us=0, chunks=reads, end_us=end_us)

        m = measure_recorded(route, True, status=200, headers_us=0, chunks=reads, end_us=end_us)
        fold_s = best_cpu_s(fold_once, args.repeat, args.rounds)
        print(
            f"{label}: {len(reads)} reads, {len(m.chunk_offsets_us)} output events: "
            f"measure_recorded {fold_s * 1e6:.1f} us/call"
        )


if __name__ == "__main__":
    main()
