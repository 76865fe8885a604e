"""How long ``specproxy report`` takes, and how much memory it needs, on long runs.

Run from the repository root (one size per run keeps the machine usable):

    nice .venv/bin/python bench/report_scale.py --records 100000 300000 [--keep DIR]

Writes a synthetic mirror run per size (realistic pairs: 32-1,000 output tokens, the
baseline one token per stream event, the candidate 1-4, per-event offsets; 2% failures
on each side, 20 warm-up pairs, five categories; histogram logs as the recorder writes
them), then times ``specproxy report DIR --format json`` in a child process and prints
wall and CPU seconds (the report's own worker processes included: from 64 MB of records
it reads byte ranges in parallel, ``report.scan``), the peak RSS of its largest process,
the records file's size and bytes per record, and the bytes per record of 32-, 256- and
1,000-token answers.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specproxy.core.histogram import HISTOGRAM_METRICS, LatencyHistogram, format_histogram_log
from specproxy.core.model import (
    CHUNK_ARRAYS,
    CHUNK_SUMMARY,
    Acceptance,
    AcceptanceSource,
    ErrorKind,
    Measurement,
    RequestRecord,
    Role,
    Route,
    SendMode,
)
from specproxy.core.timing import token_latencies_us
from specproxy.testing.fabricate import experiment

START = 1_750_000_000.0
RATE = 50.0  # mirrored requests per second
CATEGORIES = ("coding", "math", "writing", "reasoning", "extraction")
TEMPLATES = 300
WARMUP_PAIRS = 20
FAIL = 0.02


def _measurement(
    rng: random.Random, tokens: int, per_event: tuple[int, int], itl_us: int
) -> Measurement:
    offsets, counts, at, left = [], [], rng.randint(15_000, 60_000), tokens
    while left > 0:
        n = min(left, rng.randint(*per_event))
        offsets.append(at)
        counts.append(n)
        left -= n
        at += int(itl_us * n * rng.uniform(0.7, 1.4))
    e2e = offsets[-1] + rng.randint(100, 2_000)
    spec = per_event[1] > 1
    return Measurement(
        status=200,
        headers_us=offsets[0] - 2_000,
        ttft_us=offsets[0],
        e2e_us=e2e,
        tpot_us=(e2e - offsets[0]) // max(tokens - 1, 1),
        chunk_offsets_us=tuple(offsets),
        chunk_tokens=tuple(counts),
        prompt_tokens=rng.randint(20, 2_000),
        completion_tokens=tokens,
        cached_tokens=0,
        finish_reason="length",
        output_sha256=f"{rng.getrandbits(256):064x}",
        acceptance=Acceptance(
            AcceptanceSource.META_INFO,
            accept_length=tokens / len(counts) if spec else 1.0,
            verify_ct=len(counts),
            accept_length_from="spec_accept_length",
        ),
        server_e2e_us=e2e - 1_000,
    )


def _record(side: Role, m: Measurement) -> dict[str, Any]:
    rec = RequestRecord(
        experiment_id="exp000000001",
        request_id="r",
        side=side,
        route=Route.CHAT,
        stream=True,
        backend_url=f"http://127.0.0.1:{30000 if side is Role.BASELINE else 30001}",
        sent_at_unix_s=START,
        actual_send_us=0,
        measurement=m,
        mode=SendMode.MIRROR,
        shadow=side is Role.CANDIDATE,
        fingerprint="f" * 16,
    )
    return rec.to_dict()


def _failed(side: Role, rng: random.Random) -> dict[str, Any]:
    m = Measurement(status=504, error_kind=ErrorKind.TIMEOUT, e2e_us=rng.randint(10**6, 3 * 10**6))
    return _record(side, m)


def templates(rng: random.Random) -> list[tuple[int, Measurement, Measurement]]:
    """(tokens, baseline, candidate) measurements that records are stamped from."""
    out = []
    for _ in range(TEMPLATES):
        tokens = int(32 * (1000 / 32) ** rng.random())
        out.append(
            (
                tokens,
                _measurement(rng, tokens, (1, 1), 12_000),
                _measurement(rng, tokens, (1, 4), 7_000),
            )
        )
    return out


class _Hists:
    def __init__(self) -> None:
        self.h = {side: {m: LatencyHistogram() for m in HISTOGRAM_METRICS} for side in Role}

    def add(self, side: Role, m: Measurement, times: int) -> None:
        h = self.h[side]
        for name in ("ttft_us", "tpot_us", "e2e_us"):
            value = getattr(m, name)
            if value is not None and times:
                h[name].record(value, times)
        for value, n in token_latencies_us(m.chunk_offsets_us, m.chunk_tokens):
            h["itl_us"].record(value, n * times)

    def write(self, run: Path, end: float) -> None:
        (run / "histograms").mkdir(exist_ok=True)
        for side in Role:
            text = format_histogram_log(
                list(self.h[side].items()), start_unix_s=START, end_unix_s=end
            )
            (run / "histograms" / f"{side.value}.hlog").write_text(text, encoding="utf-8")


def write_run(run: Path, n_records: int, seed: int = 7) -> None:
    """A synthetic mirror run of ``n_records`` records (half as many pairs)."""
    rng = random.Random(seed)
    tpl = templates(rng)
    base_dicts = [(_record(Role.BASELINE, b), _record(Role.CANDIDATE, c)) for _, b, c in tpl]
    uses = [[0, 0] for _ in tpl]
    run.mkdir(parents=True, exist_ok=True)
    (run / "experiment.json").write_bytes(orjson.dumps(experiment()))
    with (run / "requests.jsonl").open("wb") as fh:
        for i in range(n_records // 2):
            k = rng.randrange(TEMPLATES)
            sent = START + i / RATE
            for s, side in enumerate(Role):
                if rng.random() < FAIL:
                    d = _failed(side, rng)
                else:
                    d = dict(base_dicts[k][s])
                    uses[k][s] += i >= WARMUP_PAIRS
                d.update(
                    request_id=f"req-{i:09d}-{side.value[0]}",
                    pair_id=f"pair-{i:09d}",
                    sent_at_unix_s=sent + s * 1e-4,
                    actual_send_us=int((sent - START) * 1e6),
                    intended_send_us=int((sent - START) * 1e6) - 50,
                    send_lag_us=50,
                    in_flight_at_send=rng.randint(1, 64),
                    warmup=i < WARMUP_PAIRS,
                    category=CATEGORIES[k % len(CATEGORIES)],
                    trace_index=i,
                )
                fh.write(orjson.dumps(d, option=orjson.OPT_APPEND_NEWLINE))
    hists = _Hists()
    for (_, b, c), (nb, nc) in zip(tpl, uses, strict=True):
        hists.add(Role.BASELINE, b, nb)
        hists.add(Role.CANDIDATE, c, nc)
    hists.write(run, START + n_records / 2 / RATE)


def time_report(run: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of ``specproxy report RUN --format json``
    in a child process (CPU time is the fairer figure on a shared machine)."""
    exe = Path(sys.executable).with_name("specproxy")
    t0 = time.perf_counter()
    child = subprocess.Popen(
        [str(exe), "report", str(run), "--format", "json"], stdout=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"specproxy report failed with exit code {child.returncode}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def _sizes(side: Role, m: Measurement) -> tuple[int, int, int]:
    """Bytes of one record line: as written (schema 3: chunk summary and gaps), with
    schema 1's absolute offsets and no summary, and without any chunk arrays (the summary
    kept)."""
    data = _record(side, m)
    now = len(orjson.dumps(data)) + 1
    data.pop("chunk_gaps_us")
    plain = {k: v for k, v in data.items() if k not in CHUNK_SUMMARY}
    old = len(orjson.dumps({**plain, "chunk_offsets_us": list(m.chunk_offsets_us)})) + 1
    bare = {k: v for k, v in data.items() if k not in CHUNK_ARRAYS}
    return now, old, len(orjson.dumps(bare)) + 1


def record_sizes() -> list[str]:
    """Bytes per record of 32-, 256- and 1,000-token answers, each side, three ways."""
    rng = random.Random(3)
    lines = []
    for tokens in (32, 256, 1000):
        b = _measurement(rng, tokens, (1, 1), 12_000)
        c = _measurement(rng, tokens, (1, 4), 7_000)
        for side, m in ((Role.BASELINE, b), (Role.CANDIDATE, c)):
            now, old, bare = _sizes(side, m)
            lines.append(
                f"{tokens:>5} tokens, {side.value:<9} ({len(m.chunk_tokens):>4} events): "
                f"{now:>6,} B  (schema 1: {old:,} B; without chunk arrays: {bare:,} B)"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[100_000, 300_000])
    parser.add_argument(
        "--keep", type=Path, default=None, help="Write the runs under DIR and keep them."
    )
    args = parser.parse_args()
    print("record size:")
    for line in record_sizes():
        print(line)
    print(
        f"{'records':>10} {'wall s':>8} {'CPU s':>8} {'peak RSS MB':>12} {'file MB':>8} "
        f"{'B/record':>9} {'CPU us/record':>14}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        for n in args.records:
            run = base / f"run-{n}"
            write_run(run, n)
            size = (run / "requests.jsonl").stat().st_size
            seconds, cpu, rss = time_report(run)
            print(
                f"{n:>10,} {seconds:>8.2f} {cpu:>8.2f} {rss:>12.0f} {size / 1e6:>8.0f} "
                f"{size / n:>9.0f} {cpu / n * 1e6:>14.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
