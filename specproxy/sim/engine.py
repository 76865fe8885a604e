"""The simulated scheduler: one loop that steps every running request together.

Like SGLang's scheduler (without mixed chunked prefill), each iteration is either a
prefill batch (new requests admitted while fewer than ``max_running`` run; it costs
``prefill_us_per_token`` per uncached prompt token and yields each request's first
token) or one decode/verify step for the whole running batch. A step over ``n``
running requests costs ``step_us * (1 + contention * (n - 1)) + per_token_us *
tokens_in_step``, with ``step_us`` the ``decode_step_us`` (baseline) or
``verify_step_us`` (speculative) and ``tokens_in_step`` the tokens the target computes:
``n`` on the baseline, ``n * num_draft_tokens`` on a verify step; a verify step also
pays ``draft_us`` (``num_steps`` draft steps, each independent of the batch; with
``--speculative-adaptive`` the steps, so the draft tokens and the draft cost, are the
``sim.adaptive`` controller's at each step); an optional
``sim.variation.Variation`` multiplies every step's cost by its factor at the step's
start (regimes, drift episodes; off by default). Time is
spent on a ``Clock`` (``asyncio.sleep`` on ``perf_counter_ns``; tests may pass a virtual
one) against a chained deadline, so timer overshoot does not accumulate over a busy
period; with zero costs the loop yields once per step and never spins while idle (it
waits on an event).

Each step appends the tokens it produced to each job as one *emission*; HTTP
handlers send one stream event per emission, so chunking depends only on the
request (deterministic), never on how fast the client reads. Owns the waiting queue,
the running batch and the prefix cache; metrics are pushed to an ``EngineObserver``.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import random
import time
from dataclasses import dataclass, field
from typing import Protocol

from specproxy.sim.acceptance import AcceptanceModel, SpecCounts
from specproxy.sim.adaptive import AdaptiveSteps
from specproxy.sim.text import OutputPlan
from specproxy.sim.variation import Variation

CACHE_BLOCK_TOKENS = 16
CACHE_CAPACITY = 200_000
CATCH_UP_NS = 50_000_000  # lateness (timer, busy event loop) a chain of steps absorbs


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """Step costs in integer microseconds (prefill and per-token: nanoseconds per token)."""

    decode_step_us: int
    verify_step_us: int
    prefill_ns_per_token: int
    contention: float
    per_token_ns: int = 0
    draft_us: int = 0  # per verify step: num_steps x draft_step
    verify_tokens: int = 1  # tokens computed per running request on a verify step
    draft_step_us: int = 0  # one draft step (adaptive steps: draft_us follows the steps)

    def __post_init__(self) -> None:
        costs = (self.decode_step_us, self.verify_step_us, self.prefill_ns_per_token)
        if min(*costs, self.per_token_ns, self.draft_us) < 0:
            raise ValueError("latency costs must not be negative")
        if self.contention < 0:
            raise ValueError("contention must not be negative")
        if self.verify_tokens < 1:
            raise ValueError("verify_tokens must be >= 1")

    @classmethod
    def from_ms(
        cls,
        *,
        decode_step_ms: float,
        verify_step_ms: float,
        prefill_us_per_token: float,
        contention: float,
        per_token_us: float = 0.0,
        draft_step_ms: float = 0.0,
        num_steps: int = 0,
        num_draft_tokens: int = 1,
    ) -> LatencyModel:
        return cls(
            decode_step_us=round(decode_step_ms * 1000),
            verify_step_us=round(verify_step_ms * 1000),
            prefill_ns_per_token=round(prefill_us_per_token * 1000),
            contention=contention,
            per_token_ns=round(per_token_us * 1000),
            draft_us=round(num_steps * draft_step_ms * 1000),
            verify_tokens=num_draft_tokens,
            draft_step_us=round(draft_step_ms * 1000),
        )

    def prefill_us(self, uncached_tokens: int) -> int:
        return uncached_tokens * self.prefill_ns_per_token // 1000

    def step_us(self, running: int, *, speculative: bool, steps: int | None = None) -> int:
        """One decode (baseline) or verify step's cost with ``running`` requests in the batch;
        ``steps``: this step's draft steps when they change at runtime (topk 1)."""
        base = self.verify_step_us if speculative else self.decode_step_us
        fixed = round(base * (1.0 + self.contention * max(0, running - 1)))
        verify = self.verify_tokens if steps is None else steps + 1
        tokens = running * (verify if speculative else 1)
        extra = (
            (self.draft_us if steps is None else steps * self.draft_step_us) if speculative else 0
        )
        return fixed + round(self.per_token_ns * tokens / 1000) + extra


@dataclass(eq=False, slots=True)
class SimJob:
    """One request inside the engine; written by the engine, read by its HTTP handler."""

    rid: str
    prompt_ids: list[int]
    plan: OutputPlan
    acceptance_rng: random.Random | None = None
    spec: SpecCounts | None = None
    counted: bool = True
    stream: bool = False
    arrival_ns: int = field(default_factory=time.perf_counter_ns)
    arrival_unix_s: float = field(default_factory=time.time)
    cached_tokens: int = 0
    produced: int = 0
    emissions: list[int] = field(default_factory=list)  # cumulative token counts
    emit_ns: list[int] = field(default_factory=list)
    prefill_start_ns: int | None = None
    finish_ns: int | None = None
    finish_type: str | None = None  # "length", "stop" or "abort"
    abort_message: str = ""
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # every emission, and the end
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # only the end (``done``)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def done(self) -> bool:
        return self.finish_type is not None

    @property
    def output_ids(self) -> tuple[int, ...]:
        return self.plan.token_ids[: self.produced]

    def emit(self, count: int, now_ns: int) -> bool:
        """Append ``count`` tokens as one emission; True when that finished the job."""
        self.produced += count
        self.emissions.append(self.produced)
        self.emit_ns.append(now_ns)
        if self.produced >= len(self.plan.token_ids):
            self.finish_type = self.plan.finish_type
            self.finish_ns = now_ns
            self.ended.set()
        self.changed.set()
        return self.finish_type is not None

    def finish_aborted(self, message: str) -> None:
        if self.done:
            return
        self.finish_type = "abort"
        self.abort_message = message
        self.finish_ns = time.perf_counter_ns()
        self.ended.set()
        self.changed.set()


class EngineObserver(Protocol):
    """Receives what the engine did; implemented by the server's statistics."""

    def on_prefill(self, jobs: list[SimJob], duration_us: int) -> None: ...

    def on_decode_step(self, batch_size: int, accepted_drafts: int, tokens: int) -> None: ...

    def on_finished(self, job: SimJob) -> None: ...


class Clock(Protocol):
    """Where the engine reads the time and waits for a step's end."""

    def now_ns(self) -> int: ...

    async def sleep_until(self, deadline_ns: int) -> None: ...


class WallClock:
    """``time.perf_counter_ns`` and ``asyncio.sleep``: the clock of a real server."""

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    async def sleep_until(self, deadline_ns: int) -> None:
        await asyncio.sleep(max(0, deadline_ns - time.perf_counter_ns()) / 1e9)


class PrefixCache:
    """Prompt prefixes seen before, at 16-token granularity plus the exact prompt."""

    def __init__(self, capacity: int = CACHE_CAPACITY) -> None:
        self._entries: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._capacity = capacity

    @staticmethod
    def _digests(ids: list[int]) -> list[tuple[int, bytes]]:
        """Chained digests of each 16-token prefix; any int is a valid id (client input_ids)."""
        digest = hashlib.blake2b(digest_size=16)
        out: list[tuple[int, bytes]] = []
        for start in range(0, len(ids), CACHE_BLOCK_TOKENS):
            block = ids[start : start + CACHE_BLOCK_TOKENS]
            digest.update(",".join(map(str, block)).encode("ascii") + b";")
            out.append((start + len(block), digest.copy().digest()))
        return out

    def match_and_insert(self, ids: list[int]) -> int:
        """Cached prompt tokens for ``ids`` (at most len - 1), then remember ``ids``."""
        digests = self._digests(ids)
        cached = 0
        for length, key in reversed(digests):
            if key in self._entries:
                cached = min(length, len(ids) - 1)
                break
        for _, key in digests:
            self._entries[key] = None
            self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return max(0, cached)

    def clear(self) -> None:
        self._entries.clear()


class Engine:
    """The scheduler loop; see the module docstring. Run ``run()`` as one named task."""

    def __init__(
        self,
        *,
        latency: LatencyModel,
        max_running: int,
        acceptance: AcceptanceModel | None,
        observer: EngineObserver,
        prefix_caching: bool = True,
        clock: Clock | None = None,
        variation: Variation | None = None,
        adaptive: AdaptiveSteps | None = None,
    ) -> None:
        self._latency = latency
        self._adaptive = adaptive
        self._clock = clock if clock is not None else WallClock()
        self._variation = variation
        self._origin_ns = self._clock.now_ns()
        self._max_running = max_running
        self._acceptance = acceptance
        self._speculative = acceptance is not None
        self._observer = observer
        self._waiting: collections.deque[SimJob] = collections.deque()
        self._running: list[SimJob] = []
        self._wake = asyncio.Event()
        self._progress: list[asyncio.Future[None]] = []
        self._deadline_ns = 0
        self._prefix_caching = prefix_caching
        self.cache = PrefixCache()

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def used_tokens(self) -> int:
        """KV slots held by running requests (prompt plus output so far)."""
        return sum(j.prompt_tokens + j.produced for j in self._running)

    @property
    def idle(self) -> bool:
        return not self._running and not self._waiting

    def submit(self, job: SimJob) -> None:
        self._waiting.append(job)
        self._wake.set()

    def abort(self, rid: str | None, message: str) -> int:
        """Abort the job with ``rid`` (every job when None); returns how many were aborted."""
        jobs = [j for j in (*self._waiting, *self._running) if rid is None or j.rid == rid]
        for job in jobs:
            job.finish_aborted(message)
        return len(jobs)

    def next_progress(self) -> asyncio.Future[None]:
        """A future resolved when the next step (prefill or decode) completes."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._progress.append(future)
        self._wake.set()
        return future

    async def run(self) -> None:
        """Step forever; cancel the task to stop."""
        while True:
            self._drop_finished()
            if not self._waiting and not self._running:
                self._resolve_progress()
                self._wake.clear()
                await self._wake.wait()
                self._deadline_ns = 0  # idle: the next step starts when it is scheduled
                continue
            if self._waiting and len(self._running) < self._max_running:
                await self._prefill_step()
            else:
                await self._decode_step()
            self._resolve_progress()

    def _drop_finished(self) -> None:
        """Forget jobs that finished or were aborted; the only filter of both queues per step."""
        if any(j.done for j in self._waiting):
            self._waiting = collections.deque(j for j in self._waiting if not j.done)
        self._running = [j for j in self._running if not j.done]

    def _resolve_progress(self) -> None:
        waiters, self._progress = self._progress, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    async def _spend(self, duration_us: int) -> None:
        """Sleep until the end of a step of ``duration_us`` that starts when the last one ended.

        Back-to-back steps are chained on the previous deadline, so timer lateness and the
        loop's own work do not add up; after idling, or when more than ``CATCH_UP_NS``
        late, the step starts now.
        """
        now = self._clock.now_ns()
        start = self._deadline_ns if now - self._deadline_ns < CATCH_UP_NS else now
        if self._variation is not None:  # sim.variation: regimes and drift episodes
            duration_us = round(
                duration_us * self._variation.factor((start - self._origin_ns) / 1e9)
            )
        self._deadline_ns = start + duration_us * 1000
        await self._clock.sleep_until(self._deadline_ns)

    async def _prefill_step(self) -> None:
        batch: list[SimJob] = []
        start_ns = self._clock.now_ns()
        while self._waiting and len(self._running) + len(batch) < self._max_running:
            job = self._waiting.popleft()
            job.prefill_start_ns = start_ns
            if job.counted and self._prefix_caching:
                job.cached_tokens = self.cache.match_and_insert(job.prompt_ids)
            batch.append(job)
        uncached = sum(j.prompt_tokens - j.cached_tokens for j in batch)
        duration_us = self._latency.prefill_us(uncached)
        await self._spend(duration_us)
        now = self._clock.now_ns()
        for job in batch:
            if job.done:
                continue
            if job.emit(1, now):
                self._finished(job)
            else:
                self._running.append(job)
        self._observer.on_prefill([j for j in batch if j.counted], duration_us)

    async def _decode_step(self) -> None:
        batch = self._running  # no finished job: _drop_finished ran just before
        steps = self._adaptive.steps if self._adaptive is not None else None
        cost = self._latency.step_us(len(batch), speculative=self._speculative, steps=steps)
        await self._spend(cost)
        now = self._clock.now_ns()
        accepted_total = tokens_total = 0
        kept_all: list[int] = []
        for job in batch:
            if job.done:  # aborted while the step ran
                continue
            kept = self._draw_kept(job, steps)
            kept_all.append(kept)
            accepted_total += kept
            tokens_total += kept + 1
            if job.emit(kept + 1, now):
                self._finished(job)
        self._observer.on_decode_step(len(batch), accepted_total, tokens_total)
        if self._adaptive is not None:
            self._adaptive.update(kept_all)

    def _draw_kept(self, job: SimJob, steps: int | None = None) -> int:
        if self._acceptance is None or job.acceptance_rng is None or job.spec is None:
            return 0
        remaining = len(job.plan.token_ids) - job.produced
        verified = self._acceptance.draw(job.acceptance_rng, job.prompt_tokens, steps)
        job.spec.record(verified, steps)
        return min(verified, remaining - 1)

    def _finished(self, job: SimJob) -> None:
        if job.counted:
            self._observer.on_finished(job)
