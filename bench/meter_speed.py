"""CPU cost of measuring a stream: ResponseMeter per event on real SGLang 0.5.16 captures.

Not a test: prints figures. Each capture's body is fed one SSE event at a time (as the
proxy sees socket reads) through a fresh ResponseMeter, many times over; the SSE
decoder's share is measured alone for comparison.

Usage: ``python bench/meter_speed.py [--repeat 300]`` from the repository root.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specproxy.core.measure import ResponseMeter
from specproxy.core.model import Route
from specproxy.core.sse import SseDecoder
from tests.core.captures import sglang_exchange

CASES = (
    ("run_a_init0.1/sa_copy", "generate_stream", Route.GENERATE),
    ("run_a_init0.1/base", "chat_stream_usage", Route.CHAT),
    ("run_a_init0.1/base", "completions_stream_usage", Route.COMPLETIONS),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=300)
    n = parser.parse_args().repeat
    for server, name, route in CASES:
        _, capture = sglang_exchange(server, name)
        pieces = [event.raw for event in SseDecoder().feed(capture.body)]
        t0 = time.perf_counter()
        for _ in range(n):
            meter = ResponseMeter(route, True)
            meter.on_headers(0, 200)
            for i, piece in enumerate(pieces):
                meter.feed(i, piece)
            meter.finish(len(pieces))
        meter_s = (time.perf_counter() - t0) / n
        t1 = time.perf_counter()
        for _ in range(n):
            decoder = SseDecoder()
            for piece in pieces:
                decoder.feed(piece)
        sse_s = (time.perf_counter() - t1) / n
        print(
            f"{server}/{name}: {len(pieces)} events: meter {meter_s * 1e6:.0f} us/response, "
            f"{meter_s / len(pieces) * 1e6:.1f} us/event "
            f"(SSE decoding alone {sse_s / len(pieces) * 1e6:.1f} us/event)"
        )


if __name__ == "__main__":
    main()
