"""Tiny random-weight Llama models in GGUF for the llama.cpp engine, in pure Python.

Why pure Python: the models only need to be valid, deterministic and small, so a ~100-line
GGUF writer and a small BPE trainer replace numpy, tokenizers and gguf-py, and ``make
test`` needs no second virtual environment. Every value comes from ``random.Random(seed)``
(Mersenne Twister, stable across Python versions), so the same source gives byte-identical
files; ``models_dir()`` keys the cache on this file's SHA-256.

Files written (all f32, context 4096, a ChatML template):

- ``target.gguf``: 4 layers, d=128, 4/2 heads (~1 M parameters), the model under test;
- ``draft-same.gguf``: a byte copy of the target: greedy acceptance is ~100 %;
- ``draft-small.gguf``: an unrelated 1-layer d=64 model: greedy acceptance is ~0 %;
- ``draft-noisy.gguf``: target + 2 % noise on every matrix: partial acceptance;
- ``big-target.gguf`` / ``big-draft.gguf`` (``speedup``, 69 MB): a pair where speculation
  is really faster on the CPU (see ``with_dead_layers``);
- ``models.json``: vocabulary facts, and the size and SHA-256 of each file.

The output rows of the special tokens and of tokens that are not printable ASCII are zero,
so greedy decoding never ends on EOS (every request runs to ``max_tokens``, finish reason
``length``) and output text is plain ASCII. Greedy text with a draft equals the baseline
for most prompts but not all: batched verification rounds differently on near-ties.

Run: ``python -m tools.engine.llamacpp_models OUTDIR``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import re
import shutil
import struct
import sys
from array import array
from collections import Counter
from pathlib import Path
from typing import BinaryIO, TypeAlias

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CONTEXT_TOKENS = 4096
VOCAB_TARGET = 1024
_ALIGN = 32
_TOKEN_NORMAL, _TOKEN_CONTROL = 1, 3
# GGUF value types (gguf.h): uint32, int32, float32, bool, string, array.
_U32, _I32, _F32, _BOOL, _STR, _ARR = 4, 5, 6, 7, 8, 9

_WORDS = (
    "request response stream token draft target model server client proxy latency verify "
    "accept reject batch queue slot cache prefix prompt output length window mirror "
    "split replay trace record measure report verdict faster slower baseline candidate "
    "speculative decode encode parse frame event chunk header body status error retry "
    "timeout budget the a an of in on to for with from by and or not is are was be has "
    "have will can one two three four small large fast slow early late first last next "
    "each every red green blue river mountain city garden window paper letter music "
    "story question"
)
_LEXICON = _WORDS.split()
_PRETOKEN = re.compile(r"'(?:s|t|re|ve|m|ll|d)| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+")


def _byte_symbols() -> list[str]:
    """GPT-2's byte -> printable character table (index = byte value)."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    table: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def _corpus(seed: int, lines: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(_LEXICON) for _ in range(rng.randint(3, 12))]
        if rng.random() < 0.4:
            words[0] = words[0].capitalize()
        if rng.random() < 0.2:
            words.append(str(rng.randint(0, 99)))
        out.append(" ".join(words) + rng.choice(".,?!:\n"))
    return out


def train_bpe(seed: int, vocab_target: int) -> tuple[list[str], list[str]]:
    """Byte-level BPE: returns (tokens, merges); ids 0..2 are the specials, then 256 bytes."""
    symbols = _byte_symbols()
    words: Counter[tuple[str, ...]] = Counter()
    for line in _corpus(seed, 4000):
        for piece in _PRETOKEN.findall(line):
            words[tuple(symbols[b] for b in piece.encode())] += 1
    tokens = [*SPECIALS, *symbols]
    merges: list[str] = []
    while len(tokens) < vocab_target:
        pairs: Counter[tuple[str, str]] = Counter()
        for word, count in words.items():
            for pair in itertools.pairwise(word):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))  # most frequent, ties by text
        if pairs[best] < 2:
            break
        merges.append(f"{best[0]} {best[1]}")
        tokens.append(best[0] + best[1])
        words = Counter({_merge(word, best): count for word, count in words.items()})
    return tokens, merges


def _merge(word: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    out: list[str] = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def unwinnable_ids(tokens: list[str]) -> list[int]:
    """Specials and tokens whose bytes are not printable ASCII or newline."""
    byte_of = {ch: b for b, ch in enumerate(_byte_symbols())}
    bad = list(range(len(SPECIALS)))
    for i, text in enumerate(tokens[len(SPECIALS) :], start=len(SPECIALS)):
        if not all(32 <= byte_of[ch] < 127 or byte_of[ch] == 10 for ch in text):
            bad.append(i)
    return bad


def _uniform(rng: random.Random, n: int, std: float) -> array[float]:
    """``n`` float32 values, uniform with mean 0 and standard deviation ``std``."""
    half = std * math.sqrt(3.0)
    draw = rng.random
    return array("f", [(2.0 * draw() - 1.0) * half for _ in range(n)])


# name -> (shape in (out, in) order, float32 data); a string: array is not subscriptable in 3.11
Tensors: TypeAlias = "dict[str, tuple[tuple[int, ...], array[float]]]"


def random_llama(
    seed: int, vocab: int, *, d: int, layers: int, ff: int, zero_rows: list[int]
) -> Tensors:
    """Random Llama weights; shapes are (out, in); ``zero_rows`` of the output head are 0."""
    rng = random.Random(seed)
    heads, kv_heads = max(1, d // 32), max(1, d // 64)
    head_dim = d // heads
    t: Tensors = {"token_embd.weight": ((vocab, d), _uniform(rng, vocab * d, 1.0))}
    t["output_norm.weight"] = ((d,), array("f", [1.0]) * d)
    head = _uniform(rng, vocab * d, 5.0 / math.sqrt(d))  # logit scale ~5: clear greedy winners
    for row in zero_rows:
        head[row * d : (row + 1) * d] = array("f", [0.0]) * d
    t["output.weight"] = ((vocab, d), head)
    s_in, s_ff = 1.0 / math.sqrt(d), 1.0 / math.sqrt(ff)
    for i in range(layers):
        shapes = {
            "attn_q": ((heads * head_dim, d), s_in),
            "attn_k": ((kv_heads * head_dim, d), s_in),
            "attn_v": ((kv_heads * head_dim, d), s_in),
            "attn_output": ((d, heads * head_dim), s_in),
            "ffn_gate": ((ff, d), s_in),
            "ffn_up": ((ff, d), s_in),
            "ffn_down": ((d, ff), s_ff),
        }
        t[f"blk.{i}.attn_norm.weight"] = ((d,), array("f", [1.0]) * d)
        t[f"blk.{i}.ffn_norm.weight"] = ((d,), array("f", [1.0]) * d)
        for name, (shape, std) in shapes.items():
            t[f"blk.{i}.{name}.weight"] = (shape, _uniform(rng, shape[0] * shape[1], std))
    return t


def with_dead_layers(draft: Tensors, layers: int) -> Tensors:
    """``draft`` grown to ``layers`` layers that cost full compute but change nothing.

    Layers 1.. reuse layer 0's input projections and have zero ``attn_output`` and
    ``ffn_down``, so they add nothing to the residual stream: the grown model predicts
    what ``draft`` predicts at several times its cost, which is the only way found to get a
    real speculative speed-up on the CPU with random weights.
    """
    grown = dict(draft)
    for i in range(1, layers):
        for name in ("attn_norm", "ffn_norm", "attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up"):
            grown[f"blk.{i}.{name}.weight"] = draft[f"blk.0.{name}.weight"]
        for name in ("attn_output", "ffn_down"):
            shape = draft[f"blk.0.{name}.weight"][0]
            grown[f"blk.{i}.{name}.weight"] = (shape, array("f", [0.0]) * (shape[0] * shape[1]))
    return grown


def with_noise(tensors: Tensors, seed: int, relative: float, zero_rows: list[int]) -> Tensors:
    """A copy of ``tensors`` with uniform noise of ``relative`` x each matrix's std added."""
    rng = random.Random(seed)
    out: Tensors = {}
    for name, (shape, data) in tensors.items():
        if len(shape) == 1:
            out[name] = (shape, array("f", data))
            continue
        mean = math.fsum(data) / len(data)
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in data) / len(data))
        noise = _uniform(rng, len(data), relative * std)
        noisy = array("f", [x + e for x, e in zip(data, noise, strict=True)])
        if name == "output.weight":
            d = shape[1]
            for row in zero_rows:
                noisy[row * d : (row + 1) * d] = array("f", [0.0]) * d
        out[name] = (shape, noisy)
    return out


class _Gguf:
    """Serialises GGUF v3 (little-endian): header, key/values, tensor infos, aligned data."""

    def __init__(self) -> None:
        self.kv = bytearray()
        self.n_kv = 0

    @staticmethod
    def text(value: str) -> bytes:
        raw = value.encode()
        return struct.pack("<Q", len(raw)) + raw

    def add(self, key: str, kind: int, value: object) -> None:
        self.kv += self.text(key) + struct.pack("<I", kind) + self.encode(kind, value)
        self.n_kv += 1

    def add_array(self, key: str, kind: int, values: list[str] | list[int]) -> None:
        body = b"".join(self.encode(kind, v) for v in values)
        self.kv += self.text(key) + struct.pack("<IIQ", _ARR, kind, len(values)) + body
        self.n_kv += 1

    def encode(self, kind: int, value: object) -> bytes:
        if kind == _STR:
            return self.text(str(value))
        fmt = {_U32: "<I", _I32: "<i", _F32: "<f", _BOOL: "<?"}[kind]
        return struct.pack(fmt, value)

    def write(self, handle: BinaryIO, tensors: Tensors) -> None:
        infos, offset = bytearray(), 0
        for name, (shape, data) in tensors.items():
            dims = b"".join(struct.pack("<Q", n) for n in reversed(shape))  # ggml: innermost first
            infos += self.text(name) + struct.pack("<I", len(shape)) + dims
            infos += struct.pack("<IQ", 0, offset)  # type 0 = F32
            offset += -(-len(data) * 4 // _ALIGN) * _ALIGN
        head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), self.n_kv) + self.kv + infos
        handle.write(head + bytes(-len(head) % _ALIGN))
        for _shape, data in tensors.values():
            raw = data.tobytes() if sys.byteorder == "little" else _swapped(data)
            handle.write(raw + bytes(-len(raw) % _ALIGN))


def _swapped(data: array[float]) -> bytes:
    copy = array("f", data)
    copy.byteswap()
    return copy.tobytes()


def write_model(
    path: Path, name: str, tensors: Tensors, tokens: list[str], merges: list[str]
) -> None:
    """Write one llama-architecture GGUF with the shared tokenizer and ChatML template."""
    d = tensors["token_embd.weight"][0][1]
    layers = sum(1 for key in tensors if key.endswith("attn_q.weight"))
    heads = tensors["blk.0.attn_q.weight"][0][0] // (d // max(1, d // 32))
    g = _Gguf()
    g.add("general.architecture", _STR, "llama")
    g.add("general.name", _STR, name)
    g.add("general.file_type", _U32, 0)
    for key, value in (
        ("context_length", CONTEXT_TOKENS),
        ("embedding_length", d),
        ("block_count", layers),
        ("feed_forward_length", tensors["blk.0.ffn_up.weight"][0][0]),
        ("attention.head_count", heads),
        ("attention.head_count_kv", tensors["blk.0.attn_k.weight"][0][0] // (d // heads)),
        ("rope.dimension_count", d // heads),
        ("vocab_size", len(tokens)),
    ):
        g.add(f"llama.{key}", _U32, value)
    g.add("llama.attention.layer_norm_rms_epsilon", _F32, 1e-5)
    g.add("llama.rope.freq_base", _F32, 10000.0)
    g.add("tokenizer.ggml.model", _STR, "gpt2")
    g.add("tokenizer.ggml.pre", _STR, "gpt-2")  # llama.cpp's name; "gpt2" is rejected
    g.add_array("tokenizer.ggml.tokens", _STR, tokens)
    types = [_TOKEN_CONTROL if i < len(SPECIALS) else _TOKEN_NORMAL for i in range(len(tokens))]
    g.add_array("tokenizer.ggml.token_type", _I32, types)
    g.add_array("tokenizer.ggml.merges", _STR, merges)
    g.add("tokenizer.ggml.bos_token_id", _U32, 0)
    g.add("tokenizer.ggml.eos_token_id", _U32, 0)
    g.add("tokenizer.ggml.add_bos_token", _BOOL, False)
    g.add("tokenizer.chat_template", _STR, CHAT_TEMPLATE)
    partial = path.with_suffix(".partial")
    with partial.open("wb") as handle:
        g.write(handle, tensors)
    partial.rename(path)


def generator_hash() -> str:
    """SHA-256 (12 hex) of this file: the models change exactly when it does."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


def make_models(outdir: Path, *, speedup: bool = True) -> dict[str, object]:
    """Write every model into ``outdir`` (``models.json`` last, as the completion mark).

    ``speedup`` adds ``big-target.gguf`` (8 layers, d=384, layers 1-7 dead) and
    ``big-draft.gguf`` (its layer 0 alone): same greedy tokens, the draft ~6x cheaper.
    """
    outdir.mkdir(parents=True, exist_ok=True)
    tokens, merges = train_bpe(seed=1, vocab_target=VOCAB_TARGET)
    zero = unwinnable_ids(tokens)
    vocab = len(tokens)
    target = random_llama(1234, vocab, d=128, layers=4, ff=384, zero_rows=zero)
    write_model(outdir / "target.gguf", "specproxy-tiny-target", target, tokens, merges)
    shutil.copyfile(outdir / "target.gguf", outdir / "draft-same.gguf")
    small = random_llama(99, vocab, d=64, layers=1, ff=128, zero_rows=zero)
    write_model(outdir / "draft-small.gguf", "specproxy-tiny-draft-small", small, tokens, merges)
    noisy = with_noise(target, 7, 0.02, zero)
    write_model(outdir / "draft-noisy.gguf", "specproxy-tiny-draft-noisy", noisy, tokens, merges)
    files = ["target.gguf", "draft-same.gguf", "draft-small.gguf", "draft-noisy.gguf"]
    if speedup:
        draft = random_llama(4321, vocab, d=384, layers=1, ff=1152, zero_rows=zero)
        write_model(outdir / "big-draft.gguf", "specproxy-big-draft", draft, tokens, merges)
        big = with_dead_layers(draft, 8)
        write_model(outdir / "big-target.gguf", "specproxy-big-target", big, tokens, merges)
        files += ["big-draft.gguf", "big-target.gguf"]
    info: dict[str, object] = {
        "generator": generator_hash(),
        "vocab_size": vocab,
        "merges": len(merges),
        "zero_output_rows": len(zero),
        "files": {
            f: {"bytes": (outdir / f).stat().st_size, "sha256": _file_sha256(outdir / f)}
            for f in files
        },
    }
    (outdir / "models.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


if __name__ == "__main__":
    sys.stdout.write(json.dumps(make_models(Path(sys.argv[1])), indent=2) + "\n")
