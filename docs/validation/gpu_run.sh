#!/usr/bin/env bash
# The whole GPU validation in one command on the GPU host (see README.md in this folder):
#   bash docs/validation/gpu_run.sh
# Needs the GPU kit in .gpu/ with its bundle built, and OUT naming a folder for results.
# Results: $OUT/run.log and $OUT/validation-runs.tar.gz (both run directories).
set -uo pipefail
: "${OUT:?OUT must name a folder for the result files}"
RUNS=/tmp/spx-validation
export SPECPROXY_VALIDATION_KEY="sk-validation-$(date +%s)-$RANDOM"
t0=$(date +%s)
say() { echo "[validation +$(( $(date +%s) - t0 ))s] $*"; }
{
  rm -rf "$RUNS" && mkdir -p "$RUNS"
  bash .gpu/setup.sh --variants attn_off || { echo "setup failed"; exit 1; }
  . .gpu/env.sh
  export PYTHONPATH="$PWD:$PYTHONPATH"
  python3 -c 'import aiohttp, click, orjson, structlog, hdrh, specproxy; print("imports ok: specproxy", specproxy.__version__, "click", click.__version__, "aiohttp", aiohttp.__version__)' || exit 1
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
  say "dry run"
  python3 -m specproxy launch deploy/sglang/tiny-standalone.toml --dry-run
  say "matched pair, with the preflight checks run against it"
  python3 -m specproxy launch deploy/sglang/tiny-standalone.toml --run-dir "$RUNS/pair" -- sh docs/validation/pair_checks.sh
  echo "pair launch rc=$? (expected 0)"
  say "refused configuration (partial manual tuning)"
  python3 -m specproxy launch docs/validation/tiny-refused-partial-tuning.toml --run-dir "$RUNS/refused"
  echo "refused launch rc=$? (expected 1)"
  say "summary"
  python3 bench/gpu/summarize_checks.py "$RUNS" "$SPECPROXY_VALIDATION_KEY" | tee "$RUNS/summary.txt"
  nvidia-smi --query-gpu=memory.used --format=csv
  tar czf "$OUT/validation-runs.tar.gz" -C "$RUNS" .
  say "done"
} 2>&1 | tee "$OUT/run.log"
