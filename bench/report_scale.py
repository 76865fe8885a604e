"""How long ``specproxy report`` takes, and how much memory it needs, on long runs.

Run from the repository root (one size per run keeps the machine usable):

    nice .venv/bin/python bench/report_scale.py --records 100000 300000 [--keep DIR]

The records are the demo's own: three short SIMULATED demo runs (``specproxy demo``'s
``run_demo``: the proxy in mirror mode between a baseline and an EAGLE3 candidate, a chat
replay with 4 warm-up pairs, eight categories) at 32, 256 and 1,000 output tokens give
the template pairs, as the recorder wrote them (chunk arrays, prompt tokens, estimated
acceptance with its histogram). Each size is then written by re-serialising template pairs
in turn with fresh request and pair ids, send times at 50 pairs/s and 20 warm-up pairs;
2% of records on each side are replaced by a timed-out record, and the histogram logs are
rebuilt from the records written. Then ``specproxy report DIR --format json`` is timed
``--repeat`` times (the least is the figure) in a child process, printing wall and CPU
seconds (the report's own worker processes included: from 64 MB of records it reads byte
ranges in parallel, ``report.scan``), the peak RSS of its largest process, the records file's size and bytes per record, and the
bytes per record of the 32-, 256- and 1,000-token answers. After each report a floor is
timed beside it (``time_floor``: one process reading the file and parsing each line once,
without its chunk arrays), and the least report's ratio to its floor is printed: on a
shared machine the seconds move with the other load, the ratio much less.
"""

from __future__ import annotations

import argparse
import dataclasses
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

from specproxy.core.measurement.histogram import (
    HISTOGRAM_METRICS,
    LatencyHistogram,
    format_histogram_log,
)
from specproxy.core.measurement.timing import token_latencies_us
from specproxy.core.records.model import (
    CHUNK_ARRAYS,
    CHUNK_SUMMARY,
    ErrorKind,
    Measurement,
    RequestRecord,
    Role,
)

RATE = 50.0  # mirrored pairs per second
OUTPUT_LENGTHS = (32, 256, 1000)
DEMO_REQUESTS = 80
WARMUP_PAIRS = 20
FAIL = 0.02

Pair = tuple[dict[str, Any], dict[str, Any]]


def _demo_run(folder: Path, output_len: int) -> Path:
    """One SIMULATED demo run (the demo's own code path) of ``output_len``-token answers."""
    from specproxy.cli.demo import DemoSettings, run_demo
    from specproxy.runtime import run

    settings = DemoSettings(DEMO_REQUESTS, 40.0, output_len, 0.75, folder / f"demo-{output_len}")
    run_dir, _ = run(run_demo(settings))
    return Path(run_dir)


def _pairs(run_dir: Path) -> list[Pair]:
    """The run's complete mirror pairs (both sides answered), warm-ups left out."""
    by_pair: dict[str, dict[str, dict[str, Any]]] = {}
    with (run_dir / "requests.jsonl").open("rb") as fh:
        for line in fh:
            d = orjson.loads(line)
            if d["pair_id"] is not None and not d["warmup"] and d["error_kind"] is None:
                by_pair.setdefault(d["pair_id"], {})[d["side"]] = d
    return [(p["baseline"], p["candidate"]) for p in by_pair.values() if len(p) == 2]


def demo_templates(folder: Path) -> tuple[dict[str, Any], list[Pair]]:
    """The first demo run's experiment.json and the template pairs of all of them."""
    runs = [_demo_run(folder, n) for n in OUTPUT_LENGTHS]
    experiment = orjson.loads((runs[0] / "experiment.json").read_bytes())
    pairs = [pair for run_dir in runs for pair in _pairs(run_dir)]
    for pair in pairs:
        for d in pair:
            d["experiment_id"] = experiment["experiment_id"]
    return experiment, pairs


def _failed(template: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """``template``'s request as the recorder writes it when the upstream timed out."""
    rec = RequestRecord.from_dict(template)
    m = Measurement(status=504, error_kind=ErrorKind.TIMEOUT, e2e_us=rng.randint(10**6, 3 * 10**6))
    return dataclasses.replace(rec, measurement=m).to_dict()


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

    def write(self, run: Path, start: float, end: float) -> None:
        (run / "histograms").mkdir(exist_ok=True)
        for side in Role:
            text = format_histogram_log(
                list(self.h[side].items()), start_unix_s=start, end_unix_s=end
            )
            (run / "histograms" / f"{side.value}.hlog").write_text(text, encoding="utf-8")


def write_run(
    run: Path, n_records: int, experiment: dict[str, Any], pairs: list[Pair], seed: int = 7
) -> None:
    """A mirror run of ``n_records`` records (half as many pairs) re-serialised from
    ``pairs``, the experiment's own start as its first send."""
    rng = random.Random(seed)
    start = pairs[0][0]["sent_at_unix_s"]
    uses = [[0, 0] for _ in pairs]
    run.mkdir(parents=True, exist_ok=True)
    (run / "experiment.json").write_bytes(orjson.dumps(experiment))
    with (run / "requests.jsonl").open("wb") as fh:
        for i in range(n_records // 2):
            k = rng.randrange(len(pairs))
            sent = start + i / RATE
            pair_id = f"{rng.getrandbits(32):08x}{i:08x}"
            for s in range(2):  # baseline, candidate
                if rng.random() < FAIL:
                    d = _failed(pairs[k][s], rng)
                else:
                    d = dict(pairs[k][s])
                    uses[k][s] += i >= WARMUP_PAIRS
                d.update(
                    request_id=pair_id,
                    pair_id=pair_id,
                    sent_at_unix_s=sent + s * 1e-4,
                    actual_send_us=int((sent - start) * 1e6) + s * 100,
                    in_flight_at_send=rng.randint(1, 64),
                    warmup=i < WARMUP_PAIRS,
                )
                fh.write(orjson.dumps(d, option=orjson.OPT_APPEND_NEWLINE))
    hists = _Hists()
    for pair, counts in zip(pairs, uses, strict=True):
        for side, d, times in zip(Role, pair, counts, strict=True):
            hists.add(side, RequestRecord.from_dict(d).measurement, times)
    hists.write(run, start, start + n_records / 2 / RATE)


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


_FLOOR = """
import sys, time, orjson
from specproxy.report.scan import cut_line
t0, c0 = time.perf_counter(), time.process_time()
with open(sys.argv[1], "rb", buffering=1 << 20) as fh:
    for raw in fh:
        cut = cut_line(raw)
        orjson.loads(cut[0] if cut is not None else raw)
print(time.perf_counter() - t0, time.process_time() - c0)
"""


def time_floor(run: Path) -> tuple[float, float]:
    """(wall, CPU seconds) of the least any report does, in one child process: read the
    records file and parse each line once (without its chunk arrays, as the report's scan
    does). The report's ratio to it says how much more it does, whatever the machine's
    other load at the time."""
    out = subprocess.run(
        [sys.executable, "-c", _FLOOR, str(run / "requests.jsonl")],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    wall, cpu = out.stdout.split()
    return float(wall), float(cpu)


def _sizes(data: dict[str, Any]) -> tuple[int, int, int]:
    """Bytes of one record line: as written (schema 3: chunk summary and gaps), with
    schema 1's absolute offsets and no summary, and without any chunk arrays (the summary
    kept)."""
    now = len(orjson.dumps(data)) + 1
    offsets = RequestRecord.from_dict(data).measurement.chunk_offsets_us
    plain = {k: v for k, v in data.items() if k not in CHUNK_SUMMARY and k != "chunk_gaps_us"}
    old = len(orjson.dumps({**plain, "chunk_offsets_us": list(offsets)})) + 1
    bare = {k: v for k, v in data.items() if k not in CHUNK_ARRAYS}
    return now, old, len(orjson.dumps(bare)) + 1


def record_sizes(pairs: list[Pair]) -> list[str]:
    """Mean bytes per record of the 32-, 256- and 1,000-token answers, each side, three ways."""
    lines = []
    for tokens in OUTPUT_LENGTHS:
        for s, side in enumerate(Role):
            rows = [p[s] for p in pairs if p[s]["completion_tokens"] == tokens]
            sizes = [_sizes(d) for d in rows]
            now, old, bare = (sum(x) // len(sizes) for x in zip(*sizes, strict=True))
            events = sum(d["chunk_count"] for d in rows) / len(rows)
            lines.append(
                f"{tokens:>5} tokens, {side.value:<9} ({events:>6.1f} events): "
                f"{now:>6,} B  (schema 1: {old:,} B; without chunk arrays: {bare:,} B)"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[100_000, 300_000])
    parser.add_argument(
        "--keep", type=Path, default=None, help="Write the runs under DIR and keep them."
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="Time each size N times (each beside a floor)."
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        experiment, pairs = demo_templates(base)
        print(f"{len(pairs)} template pairs from {len(OUTPUT_LENGTHS)} SIMULATED demo runs")
        print("record size:")
        for line in record_sizes(pairs):
            print(line)
        print(
            f"{'records':>10} {'wall s':>8} {'CPU s':>8} {'peak RSS MB':>12} {'file MB':>8} "
            f"{'B/record':>9} {'CPU us/record':>14} {'floor wall s':>13} {'floor CPU s':>12}"
        )
        for n in args.records:
            run = base / f"run-{n}"
            write_run(run, n, experiment, pairs)
            size = (run / "requests.jsonl").stat().st_size
            rows = []
            for _ in range(args.repeat):
                seconds, cpu, rss = time_report(run)
                floor = time_floor(run)
                rows.append((seconds, cpu, rss, *floor))
                print(
                    f"{n:>10,} {seconds:>8.2f} {cpu:>8.2f} {rss:>12.0f} {size / 1e6:>8.0f} "
                    f"{size / n:>9.0f} {cpu / n * 1e6:>14.1f} {floor[0]:>13.2f} {floor[1]:>12.2f}",
                    flush=True,
                )
            best = min(rows)
            print(
                f"{n:>10,} min of {len(rows)}: {best[0]:.2f} s wall ({best[1]:.2f} s CPU); "
                f"to the floor beside it: {best[0] / best[3]:.2f}x wall, "
                f"{best[1] / best[4]:.2f}x CPU",
                flush=True,
            )


if __name__ == "__main__":
    main()
