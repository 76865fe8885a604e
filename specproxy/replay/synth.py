"""Prompt synthesis for length-only traces: text of an exact token length, with shared prefixes.

How a prompt of ``n`` tokens is made. The server's own tokenizer is asked (SGLang's
``POST /tokenize``, which the simulator implements too) which words of a fixed list of
common English words are exactly one token both at the start of a text and after a
space, and how many special tokens (BOS) it adds. A prompt is then ``n - special`` such
words joined by single spaces, which tokenizers that split on whitespace before merging
(byte-level BPE, SentencePiece) count as exactly ``n`` tokens. A self-check tokenizes a
few synthesised prompts; ``Vocabulary.exact`` records whether every one came out exact.

When the server has no usable ``/tokenize`` (or the check fails to find enough words),
the documented approximation is used: every listed word counts as one token and no
special token is added. Real tokenizers then differ by a few percent, so reports say
``prompt_tokens: approximate``.

Prefix sharing (Mooncake ``hash_ids``): the prompt is cut into blocks of 512 tokens;
block ``k`` is the 512 words drawn by ``random.Random("h:<hash_ids[k]>")``, so two
requests whose leading hash ids are equal start with identical text — and identical
tokens — for those blocks, and the server's prefix cache sees the reuse the trace had.
Blocks with no hash id are drawn from a key unique to the record (its ``file:line``), so
they share nothing by accident. Special tokens come off the last block. The vocabulary
depends on the tokenizer, so the same trace gives the same text against servers with
the same tokenizer (both sides of a matched pair).

Synthetic text is not natural language: speculative acceptance measured on it is not
representative of real traffic, and every record sent with such a prompt carries
``synthetic_prompt=True``.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

BLOCK_TOKENS = 512

_WORDS_TEXT = """
    the of and to in is that for it as was with be by on not he this are or his from at which
    but have an they you were her she there one all we their can has been more if will would
    who so no out up into do any time new about only other than what may its some could them
    these two also first then after way over where most such must like people well through
    very work made long see just before back even any many good those day how great water
    place year home old state part line world small large hand high last life under still
    city school number book house name story group music family point order young money
    system power form case week fact night color light sound field river table window paper
    garden market letter answer voice model level table board price value party plant study
    table road train green blue red white black short open close early late right left north
    south east west summer winter spring morning evening friend mother father child woman man
    game team player ball song picture word page street office room door wall floor bridge
    island ocean forest mountain valley stone metal glass wood fire earth air cloud rain snow
    wind star moon sun planet energy heart mind body head face eye ear mouth arm leg foot
"""
CANDIDATE_WORDS: tuple[str, ...] = tuple(_WORDS_TEXT.split())
"""Candidate filler words: common, lowercase, ASCII (duplicates are dropped at calibration)."""


class TokenCounter(Protocol):
    """Counts tokens with a server's tokenizer, special tokens included (``replay.tokenizer``)."""

    async def count(self, texts: Sequence[str]) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """Single-token filler words and the special-token count of one tokenizer."""

    words: tuple[str, ...]
    special_tokens: int
    source: str  # "server_tokenizer" or "approximation"
    exact: bool

    def __post_init__(self) -> None:
        if len(self.words) < 2:
            raise ValueError("a vocabulary needs at least 2 words")
        if self.special_tokens < 0:
            raise ValueError("special_tokens must be >= 0")

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "exact": self.exact,
            "special_tokens": self.special_tokens,
            "words": len(self.words),
        }


def approximate_vocabulary() -> Vocabulary:
    """The fallback: every candidate word counts as one token, no special tokens."""
    words = tuple(dict.fromkeys(CANDIDATE_WORDS))
    return Vocabulary(words, 0, "approximation", exact=False)


MIN_WORDS = 32
SELF_CHECK_LENGTHS = (1, 2, 37, 513, 1500)


async def calibrate(counter: TokenCounter) -> Vocabulary:
    """Probe ``counter`` for single-token words and the special-token count, then self-check."""
    words = list(dict.fromkeys(CANDIDATE_WORDS))
    singles = await counter.count(words)
    triples = await counter.count([f"{w} {w} {w}" for w in words])
    special_votes: dict[int, int] = {}
    for single, triple in zip(singles, triples, strict=True):
        if triple - single == 2:
            special_votes[single - 1] = special_votes.get(single - 1, 0) + 1
    if not special_votes:
        return approximate_vocabulary()
    special = max(special_votes, key=lambda k: special_votes[k])
    good = tuple(
        w
        for w, single, triple in zip(words, singles, triples, strict=True)
        if single - 1 == special and triple - single == 2
    )
    if len(good) < MIN_WORDS or special < 0:
        return approximate_vocabulary()
    vocab = Vocabulary(good, special, "server_tokenizer", exact=True)
    synth = PromptSynthesizer(vocab)
    probes = [synth.prompt(n, (7, 8, 9), f"self-check:{n}") for n in SELF_CHECK_LENGTHS]
    counts = await counter.count(probes)
    wanted = [max(n, special + 1) for n in SELF_CHECK_LENGTHS]
    return Vocabulary(good, special, "server_tokenizer", exact=counts == wanted)


class PromptSynthesizer:
    """Builds prompt text of a given token length from a calibrated ``Vocabulary``.

    Block texts are cached (least recently used first out), so long traces with many
    distinct hash ids stay within ``cache_blocks`` blocks of memory.
    """

    def __init__(self, vocab: Vocabulary, *, cache_blocks: int = 4096) -> None:
        self.vocab = vocab
        self._cache: OrderedDict[str, list[str]] = OrderedDict()
        self._cache_blocks = cache_blocks

    def _block(self, key: str) -> list[str]:
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        rng = random.Random(key)
        block = rng.choices(self.vocab.words, k=BLOCK_TOKENS)
        self._cache[key] = block
        if len(self._cache) > self._cache_blocks:
            self._cache.popitem(last=False)
        return block

    def prompt(self, input_tokens: int, hash_ids: Sequence[int], record_key: str) -> str:
        """Text that the calibrated tokenizer counts as ``input_tokens`` tokens.

        At least one word is always produced, so a request shorter than the special
        tokens comes out one token long. ``record_key`` keys the blocks without a hash id.
        """
        words_needed = max(1, input_tokens - self.vocab.special_tokens)
        parts: list[str] = []
        k = 0
        while words_needed > 0:
            key = f"h:{hash_ids[k]}" if k < len(hash_ids) else f"r:{record_key}:{k}"
            block = self._block(key)
            take = min(BLOCK_TOKENS, words_needed)
            parts.append(" ".join(block[:take]))
            words_needed -= take
            k += 1
        return " ".join(parts)
