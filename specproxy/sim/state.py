"""One simulated server's state: configuration, engine, statistics, faults, readiness.

Owns the objects every handler shares and the construction of a request's ``SimJob``
(output plan, acceptance generator, speculative counters, response id). The engine
loop itself is started and stopped by ``server.py``. Request ids: the client's
``rid`` when given; otherwise a random 32-hex id, or with ``deterministic_ids`` the
first 32 hex digits of a BLAKE2b digest of the raw request body. With
``deterministic_ids`` the prefix cache is off too (``cached_tokens`` stays 0), so a
repeated request is not told that its prompt was cached.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
import uuid

from specproxy.core.protocol.versions import SPEC_DETAILS_SINCE
from specproxy.sim.acceptance import AcceptanceModel, SpecCounts
from specproxy.sim.adaptive import AdaptiveSteps
from specproxy.sim.config import SimConfig
from specproxy.sim.engine import Engine, LatencyModel, SimJob
from specproxy.sim.faults import FaultInjector, FaultRates
from specproxy.sim.info import LiveState
from specproxy.sim.requests import GenRequest
from specproxy.sim.shapes import FIXED_CREATED, ShapeContext
from specproxy.sim.stats import ServerStats
from specproxy.sim.target import relaxation, sample_tokens
from specproxy.sim.text import OutputPlan, content_key, plan_output, seeded_rng
from specproxy.sim.variation import Variation, VariationSettings


def _acceptance(config: SimConfig) -> AcceptanceModel | None:
    """The draft's acceptance model; None without speculation."""
    spec = config.spec
    if spec is None:
        return None
    return AcceptanceModel(
        config.accept_prob,
        spec.max_accepted_drafts,
        config.long_prompt_tokens,
        config.long_accept_prob,
    )


def _latency(config: SimConfig) -> LatencyModel:
    """Step, prefill and drafting costs from the config's milliseconds."""
    spec = config.spec
    ndt = spec.num_draft_tokens if spec is not None else None
    return LatencyModel.from_ms(
        decode_step_ms=config.decode_step_ms,
        verify_step_ms=config.verify_step_ms,
        prefill_us_per_token=config.prefill_us_per_token,
        contention=config.contention,
        per_token_us=config.per_token_us,
        draft_step_ms=config.draft_step_ms,
        num_steps=spec.num_steps if spec is not None else 0,
        num_draft_tokens=ndt if ndt is not None else 1,
    )


class SimServer:
    """Shared state of one simulated SGLang server."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.spec = config.spec
        self.version = config.version  # parsed once: handlers compare it per request and chunk
        ndt = self.spec.num_draft_tokens if self.spec is not None else None
        self.stats = ServerStats(
            num_draft_tokens=ndt, decode_log_interval=config.decode_log_interval
        )
        acceptance, latency = _acceptance(config), _latency(config)
        settings = VariationSettings(
            regime_sigma=config.regime_sigma,
            regime_s=config.regime_s,
            drift_every_s=config.drift_every_s,
            drift_slowdown=config.drift_slowdown,
            drift_s=config.drift_s,
        )
        self.variation = Variation(settings, config.seed, time.time()) if settings.active else None
        self.engine = Engine(
            latency=latency,
            max_running=config.effective_max_running_requests,
            acceptance=acceptance,
            observer=self.stats,
            prefix_caching=not config.deterministic_ids,  # cache hits would change the bytes
            variation=self.variation,
            adaptive=AdaptiveSteps(self.spec.num_steps)
            if self.spec is not None and self.spec.adaptive
            else None,
        )
        rates = FaultRates(config.fail_rate, config.stall_rate, config.truncate_rate)
        self.faults = FaultInjector(rates, config.seed)
        self._ready_at_ns = time.perf_counter_ns() + round(config.startup_delay_s * 1e9)
        self.created = FIXED_CREATED if config.deterministic_ids else int(time.time())
        relax = relaxation(
            config.speculative_accept_threshold_single, config.speculative_accept_threshold_acc
        )
        self.relax = relax if self.spec is not None else 0.0  # the lossy mode (sim.target)
        self._draws = 0  # with sample_seed: sampled requests served so far

    def ready(self) -> bool:
        """False during the simulated startup delay."""
        return time.perf_counter_ns() >= self._ready_at_ns

    def live(self) -> LiveState:
        running = self.engine.num_running
        return LiveState(
            running=running,
            waiting=self.engine.num_waiting,
            used_tokens=self.engine.used_tokens,
            last_gen_throughput=self.stats.last_gen_throughput,
            avg_spec_accept_length=self.stats.avg_spec_accept_length,
            last_accept_rate=self.stats.last_accept_rate,
        )

    def response_id(self, gen: GenRequest, raw_body: bytes) -> str:
        if gen.rid is not None:
            return gen.rid
        if self.config.deterministic_ids:
            return hashlib.blake2b(raw_body, digest_size=16).hexdigest()
        return uuid.uuid4().hex

    def new_job(self, gen: GenRequest, rid: str) -> SimJob:
        """The engine job for ``gen`` (not yet submitted)."""
        key = content_key(gen.prompt_ids, gen.sampling_key)
        limit = gen.max_new_tokens if gen.max_new_tokens is not None else gen.default_max
        disagree_at = None
        if self.spec is not None and self.config.disagree_rate > 0:
            rng = seeded_rng(self.config.seed, key.hex(), "disagree-choice")
            if rng.random() < self.config.disagree_rate:
                disagree_at = rng.randint(1, max(1, limit - 1))
        plan = plan_output(
            key,
            max_new_tokens=gen.max_new_tokens,
            default_max=gen.default_max,
            ignore_eos=gen.ignore_eos,
            disagree_at=disagree_at,
        )
        if gen.temperature > 0.0:
            plan = self._sampled(plan, gen, key)
        job = SimJob(rid=rid, prompt_ids=list(gen.prompt_ids), plan=plan, stream=gen.stream)
        if self.spec is not None:
            job.acceptance_rng = seeded_rng(self.config.seed, key.hex(), "accept")
            job.spec = SpecCounts(self.spec.num_draft_tokens)
        return job

    def _sampled(self, plan: OutputPlan, gen: GenRequest, key: bytes) -> OutputPlan:
        """``plan`` with its words drawn from the target model at the request's temperature
        (``sim.target``; the lossy mode's relaxation on a speculative server), the length and
        end kept. The draws are seeded by the prompt and sampling key, as every output of this
        simulator is (a lossless candidate returns the baseline's sample, a lossy one departs
        from it at its first relaxed token), or with ``sample_seed`` by that seed, the key and
        the number of sampled requests this server has served (servers with different seeds
        sample independently; a repeated request gets a fresh sample)."""
        seed = self.config.sample_seed
        if seed is None:
            rng = seeded_rng(key.hex(), "sample")
        else:
            self._draws += 1
            rng = seeded_rng(seed, key.hex(), "sample", self._draws)
        stop = plan.finish_type == "stop"
        count = len(plan.token_ids) - (1 if stop else 0)
        prev = gen.prompt_ids[-1]
        words = sample_tokens(prev, count, gen.temperature, self.relax, rng)
        return dataclasses.replace(plan, token_ids=tuple(words) + plan.token_ids[count:])

    def shape_context(self, gen: GenRequest, rid: str) -> ShapeContext:
        version = self.version
        return ShapeContext(
            response_id=rid,
            model=gen.model,
            enable_metrics=self.config.enable_metrics,
            legacy_spec_names=version < (0, 5, 21),
            spec_details=gen.return_spec_details and version >= SPEC_DETAILS_SINCE,
            deterministic=self.config.deterministic_ids,
        )
