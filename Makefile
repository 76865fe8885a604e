# One command for the whole check: `make test`. It creates .venv, installs the
# project with its test extra, lints, type-checks, checks the import layers and runs pytest.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: test venv lint typecheck layers pytest demo clean

include mk/engine.mk

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

venv: $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'

lint: venv
	$(BIN)/ruff check specproxy tools tests bench
	$(BIN)/ruff format --check specproxy tools tests bench

typecheck: venv
	$(BIN)/mypy
	$(BIN)/mypy --strict bench/*.py
	$(BIN)/mypy --strict bench/gpu/*.py bench/gpu/*/*.py  # the GPU host's scripts (module names repeat bench's)

layers: venv
	$(BIN)/lint-imports

pytest: venv
	$(BIN)/pytest $(PYTEST_ARGS)

test: lint typecheck layers engine pytest

demo: venv
	$(BIN)/specproxy demo

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info
	find specproxy -name '*.so' -delete
