"""Simulated tokenizer and model output: deterministic, pure, no I/O.

**Prompt token counting (an approximation, stated here once).** A text is split with
the regular expression ``\\s*\\w+|\\s*[^\\w\\s]``: a run of word characters with any
whitespace before it, or one punctuation character with any whitespace before it.
Trailing whitespace is dropped. A word piece longer than ``WORD_CHUNK_CHARS`` (6)
characters counts as one token per started 6 characters. So "one two three four
five" is 5 tokens (the real captures' 35-token prompt counts 35 here too). Each token
gets the id ``7 + crc32(piece) % (VOCAB_SIZE - 7)`` (a space and a word of the output
vocabulary: that word's output id) (ids 0-6 are the special tokens of
the captured tokenizer: 0 begin-of-text, 1 end-of-text, 2 end-of-turn, 3/4/5 the
system/user/assistant roles, 6 pad). ``/tokenize`` and every ``prompt_tokens`` use
this same function, so they always agree.

A chat prompt follows the captured chat template ``<bos><|role|>content<|eot|>...
<|assistant|>``: 1 + sum(2 + tokens(content)) + 1 tokens (a 35-token user message is 39).

**Output.** The tokens a request generates depend only on its prompt token ids and
its sampling key (greedy, or temperature/top_p/top_k/seed), never on the server's
speculative settings: greedy output is the same on a baseline and a speculative
simulator (lossless speculation) unless disagreement is injected. Output tokens are
words of a fixed vocabulary, each decoded as a space and the word.
"""

from __future__ import annotations

import hashlib
import random
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

VOCAB_SIZE = 32000
WORD_CHUNK_CHARS = 6
BOS_ID, EOS_ID, EOT_ID = 0, 1, 2
ROLE_IDS = {"system": 3, "user": 4, "assistant": 5, "developer": 3, "tool": 4}
ASSISTANT_ID = 5
OUTPUT_ID_BASE = 1000
_PIECE = re.compile(r"\s*\w+|\s*[^\w\s]")

_WORD_TEXT = """
    the of and to in is that it for on with as was at by be this from or an are not have
    but they which one you were all we there can has been if more will their so would what
    about out up into do than other some time only could its new two may first then these
    any like now such over also after most made through where much before back down good
    well way even because each just those how must see between both being under never
    same another know while last might great old year off come since against go came right
    used take three states himself few house use during without again place around however
    home small found thought went say part once general high upon school every does got
    united left number course war until always away something fact though water less
    public put think almost hand enough far took head yet government system better set
    told nothing night end why called eyes find going look asked later knew point next
    program city business give group toward young days let room president side social
    given present several order national possible rather second face per among form
    important often things looked early white case john become large big need four within
    felt along children saw best church ever least power development light thing seemed
    family interest want members mind country area others done turned although open god
    service problem certain kind different thus began door help sense means whole matter
    perhaps itself york times law human line above name example action company hands local
    show whether five history gave today either act feet across taken past quite anything
    seen having death experience body word half really field am car words already themselves
    information tell together college shall money period held keep sure probably free
"""
WORDS = tuple(_WORD_TEXT.split())


def _pieces(text: str) -> list[str]:
    out: list[str] = []
    for match in _PIECE.finditer(text):
        piece = match.group(0)
        core = piece.lstrip()
        lead = piece[: len(piece) - len(core)]
        if len(core) <= WORD_CHUNK_CHARS:
            out.append(piece)
            continue
        chunks = [core[i : i + WORD_CHUNK_CHARS] for i in range(0, len(core), WORD_CHUNK_CHARS)]
        out.append(lead + chunks[0])
        out.extend(chunks[1:])
    return out


_OUTPUT_PIECES = {" " + w: OUTPUT_ID_BASE + i for i, w in enumerate(WORDS) if len(w) <= 6}


def tokenize(text: str) -> list[int]:
    """Token ids of ``text`` (see the module docstring); no special tokens are added. A
    space and an output word of at most 6 characters is that word's output id, so an output
    text tokenizes back to the ids generated (``sim.target``)."""
    return [
        _OUTPUT_PIECES.get(p) or 7 + zlib.crc32(p.encode("utf-8")) % (VOCAB_SIZE - 7)
        for p in _pieces(text)
    ]


def message_text(content: object) -> str:
    """The text of a chat message's ``content`` (a string or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [str(part.get("text", "")) for part in content if isinstance(part, dict)]
        return "".join(parts)
    return ""


def chat_prompt_ids(messages: list[dict[str, object]]) -> list[int]:
    """Token ids of a chat conversation after the captured chat template."""
    ids = [BOS_ID]
    for message in messages:
        ids.append(ROLE_IDS.get(str(message.get("role", "user")), 4))
        ids.extend(tokenize(message_text(message.get("content"))))
        ids.append(EOT_ID)
    ids.append(ASSISTANT_ID)
    return ids


def token_text(token_id: int) -> str:
    """The decoded text of one output token ('' for special tokens)."""
    if token_id < OUTPUT_ID_BASE:
        return ""
    return " " + WORDS[(token_id - OUTPUT_ID_BASE) % len(WORDS)]


def detokenize(ids: Iterable[int]) -> str:
    return "".join(token_text(i) for i in ids)


def content_key(prompt_ids: Iterable[int], sampling_key: str) -> bytes:
    """A stable 16-byte digest of a prompt and its sampling key."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(sampling_key.encode("utf-8"))
    digest.update(b"\x00")
    digest.update(",".join(map(str, prompt_ids)).encode("ascii"))
    return digest.digest()


def seeded_rng(*parts: object) -> random.Random:
    """A ``random.Random`` seeded from ``parts`` (stable across processes, unlike hash())."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode("utf-8"), digest_size=16)
    return random.Random(int.from_bytes(digest.digest(), "big"))


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """The tokens a request will generate and why it ends (``stop`` ends on ``EOS_ID``)."""

    token_ids: tuple[int, ...]
    finish_type: str  # "length" or "stop"

    def __post_init__(self) -> None:
        if not self.token_ids:
            raise ValueError("an output plan needs at least one token")
        if self.finish_type not in ("length", "stop"):
            raise ValueError(f"unknown finish type {self.finish_type!r}")


def _word_tokens(rng: random.Random, count: int) -> list[int]:
    return [OUTPUT_ID_BASE + rng.randrange(len(WORDS)) for _ in range(count)]


def plan_output(
    key: bytes,
    *,
    max_new_tokens: int | None,
    default_max: int,
    ignore_eos: bool,
    disagree_at: int | None = None,
) -> OutputPlan:
    """Plan the output of a request whose content digest is ``key``.

    With ``max_new_tokens`` given (or ``ignore_eos``) the request runs to its length;
    otherwise it ends on an end-of-text token after a natural length of 16-255 tokens
    drawn from ``key`` (capped at ``default_max``). ``disagree_at`` switches to a
    different token stream from that position on (injected disagreement).
    """
    limit = max_new_tokens if max_new_tokens is not None else default_max
    limit = max(1, limit)
    finish = "length"
    count = limit
    if max_new_tokens is None and not ignore_eos:
        natural = 16 + seeded_rng(key.hex(), "natural-length").randrange(240)
        if natural < limit:
            count, finish = natural, "stop"
    base = _word_tokens(seeded_rng(key.hex(), "tokens"), count)
    if disagree_at is not None and disagree_at < count:
        other = _word_tokens(seeded_rng(key.hex(), "disagree"), count)
        if other[disagree_at] == base[disagree_at]:
            other[disagree_at] = OUTPUT_ID_BASE + (base[disagree_at] - OUTPUT_ID_BASE + 1) % len(
                WORDS
            )
        base = base[:disagree_at] + other[disagree_at:]
    if finish == "stop":
        base[-1] = EOS_ID
    return OutputPlan(token_ids=tuple(base), finish_type=finish)
