"""Fixtures for the engine tests: the built llama.cpp engine and its three loopback servers.

The servers are started once per session and shared; tests that compare counters take
their own before/after snapshots, so the servers' history does not matter. When the
engine is not built the engine tests skip with the reason, unless
``SPECPROXY_REQUIRE_ENGINE`` is set (CI sets it), in which case they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tools.engine.llamacpp import EnginePaths, PairUrls, find_engine, start_pair
from tools.engine.llamacpp_build import CACHE_ENV, engine_dir

REQUIRE_ENV = "SPECPROXY_REQUIRE_ENGINE"


def engine_required() -> bool:
    """True when a missing engine must fail the run instead of skipping it."""
    return os.environ.get(REQUIRE_ENV, "").strip() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def engine_paths() -> EnginePaths:
    """The built engine; skips (or fails under SPECPROXY_REQUIRE_ENGINE) when it is absent."""
    paths = find_engine()
    if paths is None:
        reason = (
            f"llama.cpp engine not built in {engine_dir()} (build it with `make engine` or "
            f"`python -m tools.engine.llamacpp build`; {CACHE_ENV} moves the cache)"
        )
        if engine_required():
            pytest.fail(f"{REQUIRE_ENV} is set but the {reason}", pytrace=False)
        pytest.skip(reason)
    return paths


@pytest.fixture(scope="session")
def llama_pair(
    engine_paths: EnginePaths, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PairUrls]:
    """Baseline, spec-same and spec-small servers on loopback for the whole session."""
    with start_pair(engine_paths, log_dir=tmp_path_factory.mktemp("llamacpp-logs")) as pair:
        yield pair
