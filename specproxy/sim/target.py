"""The simulator's "target model" under sampling, its lossy mode, and teacher-forced scoring.

Pure. SIMULATED: a toy language model, stated here once.

**The model.** Output tokens are the words of ``TARGET_WORDS`` (the words of
``sim.text.WORDS`` of at most 6 characters, first occurrence only, so that ``/tokenize`` of
an output text gives back the ids generated). The next token depends on the previous token
only: given previous id ``prev``, word ``i`` has the raw logit ``-s * ln(1 + rank_prev(i))``
where ``rank_prev`` is a permutation of the vocabulary and ``s`` in [0.8, 1.4] a sharpness,
both drawn from ``prev``. The raw log-probabilities are ``log_softmax`` of those logits; a
sampled request (temperature T > 0) draws each token from ``softmax(logits / T)``
(``top_p``/``top_k`` are not modelled). Greedy requests keep ``sim.text``'s planned words.

**The lossy mode.** SGLang's ``--speculative-accept-threshold-single`` and
``--speculative-accept-threshold-acc`` below 1.0 let the verifier accept draft tokens the
target would reject. The simulator's relaxation is ``relax = 1 - min(single, acc)``: on a
speculative server, under sampling, each output token is, with probability ``relax``, the
draft's token, drawn from the flatter draft distribution ``softmax(logits * DRAFT_FLATTEN /
T)``, instead of the target's. The outputs are then drawn from ``(1 - relax) p_T + relax q``,
so the mean raw target log-probability per token moves by exactly ``relax * (E_q[log p] -
E_pT[log p])`` averaged over contexts: ``expected_shift`` computes it with the previous
token uniform over the vocabulary (at T = 0.7 and relax 0.05: -0.113 nats/token; sampled
contexts are not uniform, and ``bench/distribution_coverage.py`` measured -0.119).

**The draws** of the HTTP server are seeded by the prompt and the sampling key
(``sim.state``), as all its outputs are: a lossless candidate returns the baseline's very
sample, so its measured shift is exactly 0, while real servers sample independently; with
``--sample-seed`` a server draws from its own stream instead, as real servers do.

**Scoring.** A ``/generate`` request with ``return_logprob`` and ``max_new_tokens: 0`` is a
teacher-forced scoring request: the answer's ``meta_info.input_token_logprobs`` holds
``[logprob, id, null]`` for every input position from ``logprob_start_len`` on (position 0 has
no logprob: ``null``), the raw (not temperature-scaled) target log-probabilities, as SGLang's
logits processor returns input-token logprobs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from functools import lru_cache

from specproxy.sim.text import OUTPUT_ID_BASE, WORDS

TARGET_WORDS: tuple[str, ...] = tuple(dict.fromkeys(w for w in WORDS if len(w) <= 6))
TARGET_IDS: tuple[int, ...] = tuple(OUTPUT_ID_BASE + WORDS.index(w) for w in TARGET_WORDS)
_INDEX = {token_id: i for i, token_id in enumerate(TARGET_IDS)}
DRAFT_FLATTEN = 0.5
LOGPROBS_APPLIED = "raw"  # input-token logprobs are not temperature-scaled


def relaxation(threshold_single: float, threshold_acc: float) -> float:
    """The lossy mode's per-token relaxation from SGLang's two accept thresholds."""
    return max(0.0, 1.0 - min(threshold_single, threshold_acc))


@lru_cache(maxsize=4096)
def raw_logprobs(prev: int) -> tuple[float, ...]:
    """Raw target log-probabilities of every ``TARGET_IDS`` word after token ``prev``."""
    rng = random.Random(f"target-{prev}")
    order = list(range(len(TARGET_IDS)))
    rng.shuffle(order)
    s = 0.8 + 0.6 * rng.random()
    logits = [0.0] * len(order)
    for rank, i in enumerate(order):
        logits[i] = -s * math.log1p(rank)
    return _log_softmax(logits)


def _log_softmax(logits: Sequence[float]) -> tuple[float, ...]:
    top = max(logits)
    total = math.log(sum(math.exp(x - top) for x in logits)) + top
    return tuple(x - total for x in logits)


@lru_cache(maxsize=8192)
def _weights(prev: int, scale: float) -> tuple[float, ...]:
    """Cumulative sampling weights of ``softmax(raw * scale)`` after ``prev``."""
    raw = raw_logprobs(prev)
    top = max(raw)
    out: list[float] = []
    acc = 0.0
    for x in raw:
        acc += math.exp((x - top) * scale)
        out.append(acc)
    return tuple(out)


def _draw(rng: random.Random, cumulative: Sequence[float]) -> int:
    u = rng.random() * cumulative[-1]
    lo, hi = 0, len(cumulative) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if cumulative[mid] < u:
            lo = mid + 1
        else:
            hi = mid
    return lo


def sample_tokens(
    prev: int, count: int, temperature: float, relax: float, rng: random.Random
) -> list[int]:
    """``count`` token ids sampled at ``temperature`` (> 0), each replaced by a draft token
    with probability ``relax`` (the lossy mode)."""
    out: list[int] = []
    for _ in range(count):
        scale = 1.0 / temperature
        if relax > 0.0 and rng.random() < relax:
            scale *= DRAFT_FLATTEN
        token = TARGET_IDS[_draw(rng, _weights(prev, scale))]
        out.append(token)
        prev = token
    return out


def token_logprob(prev: int, token: int) -> float | None:
    """Raw target log-probability of ``token`` after ``prev``; None for a token outside the
    model's vocabulary (a prompt word, a special token)."""
    i = _INDEX.get(token)
    return None if i is None else raw_logprobs(prev)[i]


def input_token_logprobs(ids: Sequence[int], start: int) -> list[list[float | int | None]]:
    """``[logprob, id, None]`` for input positions ``start`` .. end (SGLang's shape); a
    position without a logprob (0, or a token outside the vocabulary) carries None."""
    out: list[list[float | int | None]] = []
    for pos in range(max(0, start), len(ids)):
        lp = token_logprob(ids[pos - 1], ids[pos]) if pos > 0 else None
        out.append([lp, ids[pos], None])
    return out


def _expectation(prev: int, sample_scale: float) -> float:
    raw = raw_logprobs(prev)
    cumulative = _weights(prev, sample_scale)
    total, last = cumulative[-1], 0.0
    mean = 0.0
    for x, c in zip(raw, cumulative, strict=True):
        mean += (c - last) / total * x
        last = c
    return mean


def expected_shift(temperature: float, relax: float) -> float:
    """The lossy mode's shift of the mean raw log-probability per token, nats, averaged over
    the previous token uniform on the vocabulary (the model's documented effect size)."""
    scale = 1.0 / temperature
    diffs = [
        _expectation(prev, scale * DRAFT_FLATTEN) - _expectation(prev, scale) for prev in TARGET_IDS
    ]
    return relax * sum(diffs) / len(diffs)
