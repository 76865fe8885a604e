# The real speculative-decoding engine for the engine tests (tests/engine/): llama.cpp's
# llama-server built from the pinned llama-cpp-python sdist, plus tiny generated models.
# Cached outside the repository, once per version and CPU, in $SPECPROXY_ENGINE_CACHE
# (default ~/.cache/specproxy/llamacpp): about 5 minutes on 2 cores the first time, about
# a second afterwards. Needs cmake, ninja and a C++ compiler, and PyPI for the sdist.
# Included from the Makefile; `make engine` builds it, `make test` then runs the engine
# tests instead of skipping them.
ENGINE_JOBS ?= 2

.PHONY: engine

engine: venv
	nice -n 10 $(BIN)/python -m tools.engine.llamacpp build --jobs $(ENGINE_JOBS)
