"""The engine harness itself: cache keys, deterministic models, server command lines.

These run without the built engine (they never start a server).
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tools.engine import llamacpp_build as build
from tools.engine.llamacpp import SERVED_MODEL_NAME, ServerSpec
from tools.engine.llamacpp_models import SPECIALS, make_models, train_bpe, unwinnable_ids


def test_cache_root_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SPECPROXY_ENGINE_CACHE moves the cache, and the engine folder is keyed by version and CPU."""
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path))
    folder = build.engine_dir()
    assert folder.parent == tmp_path
    version, machine, digest = folder.name.split("-")
    assert version == build.LLAMA_CPP_PYTHON_VERSION
    assert machine
    assert len(digest) == 12
    monkeypatch.delenv(build.CACHE_ENV)
    assert build.cache_root() == Path.home() / ".cache" / "specproxy" / "llamacpp"


def test_cache_root_is_outside_the_repository() -> None:
    """The default cache is never inside the checkout (the build tree is ~300 MB)."""
    repo = Path(__file__).resolve().parents[2]
    assert not build.cache_root().resolve().is_relative_to(repo)


def test_speculative_spec_passes_draft_and_spec_type_with_one_thread() -> None:
    """A draft spec gets -md AND --spec-type (either alone leaves speculation off) and -t 1."""
    spec = ServerSpec("spec", Path("t.gguf"), draft=Path("d.gguf"), draft_max=6)
    argv = spec.argv(Path("bin/llama-server"), 18080)
    assert argv[argv.index("-md") + 1] == "d.gguf"
    assert argv[argv.index("--spec-type") + 1] == "draft-simple"
    assert argv[argv.index("--spec-draft-n-max") + 1] == "6"
    assert argv[argv.index("-t") + 1] == "1"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("-a") + 1] == SERVED_MODEL_NAME
    baseline = ServerSpec("base", Path("t.gguf")).argv(Path("bin/llama-server"), 18081)
    assert "-md" not in baseline
    assert "--spec-type" not in baseline


def test_server_spec_rejects_bad_draft_bounds() -> None:
    """draft_min above draft_max is refused with both values named."""
    with pytest.raises(ValueError, match="draft_min <= draft_max"):
        ServerSpec("spec", Path("t.gguf"), draft=Path("d.gguf"), draft_max=2, draft_min=3)


def test_tokenizer_keeps_specials_first_and_merges_in_the_vocabulary() -> None:
    """Specials are ids 0..2, then the 256 byte symbols; every merge's parts are tokens."""
    tokens, merges = train_bpe(seed=1, vocab_target=400)
    assert tuple(tokens[: len(SPECIALS)]) == SPECIALS
    assert len(tokens) == len(SPECIALS) + 256 + len(merges)
    vocab = set(tokens)
    for merge in merges:
        left, right = merge.split(" ")
        assert left in vocab
        assert right in vocab
        assert left + right in vocab
    assert set(range(len(SPECIALS))) <= set(unwinnable_ids(tokens))


def test_models_are_byte_identical_across_runs(tmp_path: Path) -> None:
    """Two generations give the same files (same SHA-256), and draft-same is a copy of target."""
    first = make_models(tmp_path / "a", speedup=False)
    second = make_models(tmp_path / "b", speedup=False)
    assert first == second
    files = first["files"]
    assert isinstance(files, dict)
    assert files["draft-same.gguf"]["sha256"] == files["target.gguf"]["sha256"]
    assert files["draft-small.gguf"]["sha256"] != files["target.gguf"]["sha256"]
    with (tmp_path / "a" / "target.gguf").open("rb") as handle:
        magic, version, n_tensors, n_kv = struct.unpack("<4sIQQ", handle.read(24))
    assert (magic, version) == (b"GGUF", 3)
    assert n_tensors == 3 + 9 * 4  # embeddings, norm, head + 9 tensors per layer
    assert n_kv > 10
