"""The acceptance model and one request's speculative statistics.

Per verify step, each of the drafts is accepted with probability ``accept_prob``
until the first rejection, never more than ``max_accepted`` (the chain depth; the
whole window for NGRAM); the target then adds one bonus token. With
``long_prompt_tokens`` set (SIMULATED: a draft trained on short contexts), a request
whose prompt is longer than that draws with ``long_accept_prob`` instead. The first
output token comes from prefill, and a step emits its kept drafts plus the bonus token,
cut where the request's output ends; as SGLang 0.5.16 does, the counters and the
histogram count the drafts the step *verified*, cut or not, so
``completion_tokens - 1 <= verify_ct + num_correct_drafts``, equal unless the last step
was cut (the real captures: 64 tokens, 44 verifies, 19 correct drafts, none cut; 64
tokens, 24 verifies, 42 correct drafts, 3 cut). Randomness comes from a per-request generator
seeded from (server seed, request content), so the same request is chunked the
same way every time. Pure: no I/O.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from specproxy.core.measurement.acceptance import accept_length_of


@dataclass(frozen=True, slots=True)
class AcceptanceModel:
    """Draws accepted drafts per verify step; see the module docstring."""

    accept_prob: float
    max_accepted: int
    long_prompt_tokens: int | None = None
    long_accept_prob: float = 0.0

    def __post_init__(self) -> None:
        for name in ("accept_prob", "long_accept_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.long_prompt_tokens is not None and self.long_prompt_tokens < 1:
            raise ValueError(f"long_prompt_tokens must be >= 1, got {self.long_prompt_tokens}")
        if self.max_accepted < 1:
            raise ValueError(f"max_accepted must be >= 1, got {self.max_accepted}")

    def draw(self, rng: random.Random, prompt_tokens: int = 0, steps: int | None = None) -> int:
        """Accepted drafts in one verify step (0..max_accepted, or 0..steps when the steps
        change at runtime) of a request whose prompt has ``prompt_tokens`` tokens."""
        long = self.long_prompt_tokens is not None and prompt_tokens > self.long_prompt_tokens
        prob = self.long_accept_prob if long else self.accept_prob
        limit = self.max_accepted if steps is None else steps
        accepted = 0
        while accepted < limit and rng.random() < prob:
            accepted += 1
        return accepted


@dataclass(slots=True)
class SpecCounts:
    """One request's speculative counters, in SGLang's meta_info terms."""

    num_draft_tokens: int
    verify_ct: int = 0
    correct_drafts: int = 0
    histogram: list[int] = field(default_factory=list)
    proposed: int = 0

    def record(self, verified_drafts: int, steps: int | None = None) -> None:
        """Count one verify step that accepted ``verified_drafts`` drafts of ``steps`` drafted
        (``num_draft_tokens - 1`` unless the steps change at runtime); counted even where the
        output ends inside the step (module docstring)."""
        self.verify_ct += 1
        self.proposed += self.num_draft_tokens - 1 if steps is None else steps
        self.correct_drafts += verified_drafts
        while len(self.histogram) <= verified_drafts:
            self.histogram.append(0)
        self.histogram[verified_drafts] += 1

    @property
    def proposed_drafts(self) -> int:
        return self.proposed

    def meta_fields(self, completion_tokens: int, *, legacy_names: bool) -> dict[str, object]:
        """The ``spec_*`` meta_info keys in SGLang's order; empty when no verify step ran."""
        if self.verify_ct == 0:
            return {}
        proposed = self.proposed_drafts
        fields: dict[str, object] = {
            "spec_accept_rate": self.correct_drafts / proposed if proposed else 0.0,
            "spec_accept_length": accept_length_of(completion_tokens, self.verify_ct),
            "spec_num_correct_drafts": self.correct_drafts,
            "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": self.verify_ct,
        }
        if legacy_names:
            fields["spec_accepted_drafts"] = self.correct_drafts
            fields["spec_proposed_drafts"] = proposed
        fields["spec_correct_drafts_histogram"] = list(self.histogram)
        if legacy_names:
            fields["spec_accept_histogram"] = list(self.histogram)
        return fields

    def tokens_details(self, completion_tokens: int) -> dict[str, object] | None:
        """``sglext.spec_tokens_details`` (SGLang 0.5.19+), or None without verify steps."""
        if self.verify_ct == 0:
            return None
        proposed = self.proposed_drafts
        return {
            "spec_accept_rate": self.correct_drafts / proposed if proposed else 0.0,
            "spec_accept_length": accept_length_of(completion_tokens, self.verify_ct),
            "spec_cap_length": 0.0,
            "spec_block_accept_length": 0.0,
            "spec_num_correct_drafts": self.correct_drafts,
            "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": self.verify_ct,
            "spec_correct_drafts_histogram": list(self.histogram),
            "spec_cap_lens_histogram": [],
        }
