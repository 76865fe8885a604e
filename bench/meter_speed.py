"""CPU cost of measuring a stream: ResponseMeter per event on real SGLang 0.5.16 captures.

Not a test: prints figures. Each capture's body is fed one SSE event at a time (as the
proxy sees socket reads) through a fresh ResponseMeter, many times over; the SSE
decoder's share is measured alone for comparison. Times are CPU seconds of this process
(``time.process_time``), the best of ``--rounds`` rounds, so that other work on a shared
machine inflates them as little as possible.

Usage: ``python bench/meter_speed.py [--repeat 20] [--rounds 30]`` from the repository root.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

# the checkout's own specproxy first (compiled_fold.sh runs this in a compiled copy)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specproxy.core.measurement.measure import ResponseMeter
from specproxy.core.protocol.sse import SseDecoder
from specproxy.core.records.model import Route
from specproxy.testing.captures import sglang_exchange

CASES = (
    ("run_a_init0.1/sa_copy", "generate_stream", Route.GENERATE),
    ("run_a_init0.1/base", "chat_stream_usage", Route.CHAT),
    ("run_a_init0.1/base", "completions_stream_usage", Route.COMPLETIONS),
)


def best_cpu_s(run_once: Callable[[], object], repeat: int, rounds: int) -> float:
    """CPU seconds of one ``run_once`` call: the best round's mean over ``repeat`` calls."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(repeat):
            run_once()
        best = min(best, (time.process_time() - t0) / repeat)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    for server, name, route in CASES:
        _, capture = sglang_exchange(server, name)
        pieces = [event.raw for event in SseDecoder().feed(capture.body)]

        def meter_once(route: Route = route, pieces: list[bytes] = pieces) -> None:
            meter = ResponseMeter(route, True)
            meter.on_headers(0, 200)
            for i, piece in enumerate(pieces):
                meter.feed(i, piece)
            meter.finish(len(pieces))

        def decode_once(pieces: list[bytes] = pieces) -> None:
            decoder = SseDecoder()
            for piece in pieces:
                decoder.feed(piece)

        meter_s = best_cpu_s(meter_once, args.repeat, args.rounds)
        sse_s = best_cpu_s(decode_once, args.repeat, args.rounds)
        print(
            f"{server}/{name}: {len(pieces)} events: meter {meter_s * 1e6:.0f} us/response, "
            f"{meter_s / len(pieces) * 1e6:.1f} us/event "
            f"(SSE decoding alone {sse_s / len(pieces) * 1e6:.1f} us/event)"
        )


if __name__ == "__main__":
    main()
