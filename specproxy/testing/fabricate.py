"""Fabricated request records and run directories with a known true effect (no server).

Each pair's baseline latency is drawn around a per-request size, and the candidate's is
the baseline's times ``true_ratio`` times lognormal noise of median 1, so the
population median of the per-pair E2E ratio is exactly ``true_ratio`` (or
``ratio_of_accept(accept_length)`` when that is given).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from specproxy.core.launch.config import build_launch_config
from specproxy.core.measurement.histogram import LatencyHistogram, format_histogram_log
from specproxy.core.measurement.timing import token_latencies_us
from specproxy.core.records.model import (
    Acceptance,
    AcceptanceSource,
    ErrorKind,
    Measurement,
    RequestRecord,
    Role,
    Route,
    SendMode,
)

START_UNIX_S = 1_750_000_000.0


def _measurement(
    rng: random.Random, *, e2e_us: int, tokens: int, accept: float | None, text: str, chunks: bool
) -> Measurement:
    ttft = max(1, int(e2e_us * 0.1))
    tpot = (e2e_us - ttft) // max(tokens - 1, 1)
    offsets: tuple[int, ...] = ()
    per_chunk: tuple[int, ...] = ()
    if chunks:
        size = max(1, round(accept or 1.0))
        per_chunk = tuple([1] + [size] * ((tokens - 1) // size))
        rest = tokens - sum(per_chunk)
        per_chunk = (*per_chunk, rest) if rest > 0 else per_chunk
        n = len(per_chunk)
        offsets = tuple(ttft + (e2e_us - ttft) * i // max(n - 1, 1) for i in range(n))
    acceptance = None
    if accept is not None:
        acceptance = Acceptance(
            source=AcceptanceSource.META_INFO,
            accept_length=accept,
            verify_ct=max(1, math.ceil(tokens / accept)),
        )
    return Measurement(
        status=200,
        headers_us=ttft // 2,
        ttft_us=ttft,
        e2e_us=e2e_us,
        tpot_us=tpot,
        chunk_offsets_us=offsets,
        chunk_tokens=per_chunk,
        prompt_tokens=rng.randint(20, 400),
        completion_tokens=tokens,
        finish_reason="length",
        output_sha256=hashlib.sha256(text.encode()).hexdigest(),
        output_text=text,
        acceptance=acceptance,
    )


def _failed(kind: ErrorKind) -> Measurement:
    return Measurement(status=503 if kind is ErrorKind.HTTP_5XX else None, error_kind=kind)


def _paired(
    experiment_id: str,
    side: Role,
    i: int,
    *,
    send_us: int,
    m: Measurement,
    mode: SendMode,
    category: str | None,
) -> RequestRecord:
    """``make_records``' record of pair ``i`` (warm-up when ``i < 0``) on one side."""
    return RequestRecord(
        experiment_id=experiment_id,
        request_id=f"{experiment_id}-{side.value}-{i}",
        side=side,
        route=Route.CHAT,
        stream=True,
        backend_url=f"http://127.0.0.1:{30000 if side is Role.BASELINE else 30001}",
        sent_at_unix_s=START_UNIX_S + send_us / 1e6,
        actual_send_us=send_us,
        intended_send_us=send_us,
        measurement=m,
        pair_id=f"p{i}",
        mode=mode,
        warmup=i < 0,
        in_flight_at_send=(i * 7) % 20 if i >= 0 else 0,
        category=category,
    )


def _side_measurement(
    rng: random.Random,
    side: Role,
    fail: float,
    *,
    lean: bool,
    chunks: bool,
    e2e: int,
    tokens: int,
    acc: float | None,
    txt: str,
) -> Measurement:
    """``make_records``' measurement of one side: failed with probability ``fail``."""
    failed = rng.random() < fail
    if failed:
        return _failed(ErrorKind.HTTP_5XX if side is Role.CANDIDATE else ErrorKind.TIMEOUT)
    if lean:
        return Measurement(status=200, ttft_us=e2e // 10, e2e_us=e2e, completion_tokens=tokens)
    return _measurement(rng, e2e_us=e2e, tokens=tokens, accept=acc, text=txt, chunks=chunks)


def make_records(
    *,
    n_pairs: int,
    true_ratio: float = 1.0,
    sigma: float = 0.2,
    seed: int = 1,
    experiment_id: str = "exp000000001",
    mode: SendMode = SendMode.MIRROR,
    accept: Callable[[random.Random], float | None] | None = None,
    ratio_of_accept: Callable[[float], float] | None = None,
    fail_base: float = 0.0,
    fail_cand: float = 0.0,
    disagree: float = 0.0,
    categories: Sequence[str] = (),
    warmup: int = 0,
    rate_per_s: float = 10.0,
    chunks: bool = False,
    lean: bool = False,
) -> list[RequestRecord]:
    """``n_pairs`` pairs (plus ``warmup`` warm-up pairs) of baseline/candidate records.

    ``lean`` records carry latencies only (no text, hash or acceptance): fast to make
    in bulk for the coverage experiments.
    """
    rng = random.Random(seed)
    out: list[RequestRecord] = []
    for i in range(-warmup, n_pairs):
        base_e2e = int(rng.lognormvariate(math.log(1_000_000), 0.5))
        tokens = rng.randint(20, 300)
        length = accept(rng) if accept is not None else 2.5
        effect = ratio_of_accept(length) if ratio_of_accept and length else true_ratio
        cand_e2e = max(1, int(base_e2e * effect * math.exp(rng.gauss(0.0, sigma))))
        text = f"answer {i} " * 5
        cand_text = text if rng.random() >= disagree else text[:7] + "X" + text[8:]
        sides = (
            (Role.BASELINE, base_e2e, None, text, fail_base),
            (Role.CANDIDATE, cand_e2e, length, cand_text, fail_cand),
        )
        for side, e2e, acc, txt, fail in sides:
            m = _side_measurement(
                rng, side, fail, lean=lean, chunks=chunks, e2e=e2e, tokens=tokens, acc=acc, txt=txt
            )
            send_us = int((i + warmup) * 1e6 / rate_per_s)
            category = categories[i % len(categories)] if categories and i >= 0 else None
            out.append(
                _paired(experiment_id, side, i, send_us=send_us, m=m, mode=mode, category=category)
            )
    return out


def fake_server_info(*, speculative: bool, version: str = "0.5.16", **extra: Any) -> dict[str, Any]:
    """A minimal SGLang ``/server_info`` object."""
    info: dict[str, Any] = {
        "version": version,
        "model_path": "/models/target",
        "revision": "0123abcd",
        "dtype": "bfloat16",
        "mem_fraction_static": 0.4,
        "max_running_requests": 48,
        "port": 30001 if speculative else 30000,
        "launch_command": "python -m sglang.launch_server --model-path /models/target",
        "speculative_algorithm": "EAGLE3" if speculative else None,
        "speculative_draft_model_path": "/models/draft" if speculative else None,
        "speculative_draft_model_revision": "4567cdef" if speculative else None,
        "speculative_num_steps": 3 if speculative else None,
    }
    info.update(extra)
    return info


def experiment(
    *,
    simulated: bool = False,
    mode: str = "mirror",
    status: str = "completed",
    sampling: dict[str, Any] | None = None,
    base_extra: dict[str, Any] | None = None,
    cand_extra: dict[str, Any] | None = None,
    facts: dict[str, Any] | None = None,
    aa: bool = False,
) -> dict[str, Any]:
    """An experiment.json dict with real ``LaunchConfig`` entries for both sides."""
    declared = {"gpu": "NVIDIA H200", "precision": "bf16"} if facts is None else facts
    base = build_launch_config(
        fake_server_info(speculative=False, **(base_extra or {})), declared=declared
    )
    cand_info = fake_server_info(speculative=not aa, **(cand_extra or {}))
    cand = build_launch_config(cand_info, declared=declared)
    return {
        "status": status,
        "mode": mode,
        "simulated": simulated,
        "aa": aa,
        "sampling": {"temperature": 0} if sampling is None else sampling,
        "workload": {"trace": "mtbench_question.jsonl", "rate": 10},
        "baseline": {
            "speculation": False,
            "fingerprint": base.fingerprint,
            "launch": base.to_dict(),
        },
        "candidate": {
            "speculation": cand.speculation,
            "fingerprint": cand.fingerprint,
            "launch": cand.to_dict(),
        },
    }


def write_run_dir(
    path: Path,
    records: Sequence[RequestRecord],
    exp: dict[str, Any] | None,
    *,
    snapshots: dict[str, dict[str, Any]] | None = None,
    histograms: bool = True,
) -> Path:
    """Lay out a run directory as the recorder does (records, histograms, snapshots)."""
    path.mkdir(parents=True, exist_ok=True)
    if exp is not None:
        (path / "experiment.json").write_text(json.dumps(exp), encoding="utf-8")
    with (path / "requests.jsonl").open("wb") as fh:  # one compact line each, as the recorder
        for rec in records:
            fh.write(orjson.dumps(rec.to_dict(), option=orjson.OPT_APPEND_NEWLINE))
    if histograms:
        (path / "histograms").mkdir(exist_ok=True)
        for side in Role:
            hists = side_histograms(records, side)
            text = format_histogram_log(
                list(hists.items()), start_unix_s=START_UNIX_S, end_unix_s=START_UNIX_S + 60
            )
            (path / "histograms" / f"{side.value}.hlog").write_text(text, encoding="utf-8")
    for name, snap in (snapshots or {}).items():
        (path / "snapshots").mkdir(exist_ok=True)
        (path / "snapshots" / f"{name}.json").write_text(json.dumps(snap), encoding="utf-8")
    return path


def side_histograms(records: Sequence[RequestRecord], side: Role) -> dict[str, LatencyHistogram]:
    """TTFT/ITL/TPOT/E2E histograms of one side's completed non-warm-up records, as the
    recorder keeps them."""
    hists = {tag: LatencyHistogram() for tag in ("ttft_us", "itl_us", "tpot_us", "e2e_us")}
    for rec in records:
        if rec.side is side and rec.ok and not rec.warmup:
            m = rec.measurement
            for tag in ("ttft_us", "tpot_us", "e2e_us"):
                value = getattr(m, tag)
                if value is not None:
                    hists[tag].record(value)
            for latency, count in token_latencies_us(m.chunk_offsets_us, m.chunk_tokens):
                hists["itl_us"].record(latency, count)
    return hists


def record(
    side: Role,
    pair_id: str | None,
    *,
    e2e_us: int | None = 1_000_000,
    ttft_us: int | None = 100_000,
    tpot_us: int | None = 10_000,
    tokens: int | None = 100,
    error: ErrorKind | None = None,
    sent_at: float = 0.0,
    warmup: bool = False,
    experiment_id: str = "exp000000001",
    mode: SendMode | None = SendMode.MIRROR,
    in_flight: int = 0,
    acceptance: Acceptance | None = None,
    sha: str | None = None,
    text: str | None = None,
    chunk_offsets_us: tuple[int, ...] = (),
    chunk_tokens: tuple[int, ...] = (),
    category: str | None = None,
    intended_send_us: int | None = None,
) -> RequestRecord:
    """One hand-made record; a failed one (``error`` given) carries no latencies."""
    m = Measurement(
        status=200,
        ttft_us=ttft_us,
        e2e_us=e2e_us,
        tpot_us=tpot_us,
        completion_tokens=tokens,
        acceptance=acceptance,
        output_sha256=sha,
        output_text=text,
        chunk_offsets_us=chunk_offsets_us,
        chunk_tokens=chunk_tokens,
    )
    if error is not None:
        m = Measurement(error_kind=error)
    return _hand_record(
        side,
        pair_id,
        m,
        sent_at=sent_at,
        warmup=warmup,
        experiment_id=experiment_id,
        mode=mode,
        in_flight=in_flight,
        category=category,
        intended_send_us=intended_send_us,
    )


def _hand_record(
    side: Role,
    pair_id: str | None,
    m: Measurement,
    *,
    sent_at: float,
    warmup: bool,
    experiment_id: str,
    mode: SendMode | None,
    in_flight: int,
    category: str | None,
    intended_send_us: int | None,
) -> RequestRecord:
    """``record``'s record around its measurement ``m``."""
    return RequestRecord(
        experiment_id=experiment_id,
        request_id=f"{side.value}-{pair_id}-{sent_at}",
        side=side,
        route=Route.CHAT,
        stream=True,
        backend_url="http://127.0.0.1:1",
        sent_at_unix_s=START_UNIX_S + sent_at,
        actual_send_us=int(sent_at * 1e6),
        intended_send_us=intended_send_us,
        measurement=m,
        pair_id=pair_id,
        mode=mode,
        warmup=warmup,
        in_flight_at_send=in_flight,
        category=category,
    )


def read_record_file(path: Path) -> list[RequestRecord]:
    """Every record of one records file, chunk arrays included, in write order (a plain
    parse of each line, independent of the report's streamed loader)."""
    return [RequestRecord.from_dict(orjson.loads(line)) for line in path.read_bytes().splitlines()]
