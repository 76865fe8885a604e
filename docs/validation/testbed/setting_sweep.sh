#!/usr/bin/env bash
# setting_sweep.sh - one GPU-host call: a setting sweep on the testbed pair (run_testbed.sh's
# 5.7B random Llama target and its first-K-layers STANDALONE draft) on real SGLang 0.5.16 and one
# H200: `specproxy sweep --launch --vary speculative-num-steps=...`, the baseline kept up, the
# candidate relaunched per value, fresh prompts (the cursor carries across values), and the best
# setting per load with schedule.json and the --speculative-adaptive-config form.
#
#   OUT=DIR bash docs/validation/testbed/setting_sweep.sh   (GPU host, repository root, kit in .gpu/)
#
# NOT RUN YET: written for the next GPU call; its figures are not in the README.
#
# Environment: K (2), EPS (0.02: the pair that pays at more levels, so that the best step count
# can move with load), SWEEP_VALUES (1,3,5), SWEEP_LEVELS (1,8,32), SWEEP_PAIRS (48),
# DEADLINE_S (seconds after start at which the sweep gets SIGINT; 540). A sweep stopped by the
# deadline keeps its finished levels (status aborted) and its report says which; to cover more
# points, call again with other SWEEP_VALUES / SWEEP_LEVELS (each call is a sweep of its own,
# written under DIR/sweep-<values>-<levels>/, so calls into one DIR add up).
# Time: each value relaunches the candidate (about 60 s with warm compile caches: carry
# .gpu/jit-cache.tar.gz from run_testbed.sh's JIT_CACHE_OUT=1), so three values and three levels
# fit one call only with warm caches; otherwise give two values.
# SGLang's --speculative-adaptive runs only with EAGLE/EAGLE3 at topk 1, so the STANDALONE pair
# cannot run the `adaptive` value; an EAGLE-family pair (../shared/gpu/build_nextn.py) can.
set -uo pipefail
: "${OUT:?OUT must name a folder for the result files}"
export EPS=${EPS:-0.02}
TB_LIB=1 . docs/validation/testbed/run_testbed.sh   # say, finish, R, M, DEADLINE, HERE, KIT
VALUES=${SWEEP_VALUES:-1,3,5}
LEVELS=${SWEEP_LEVELS:-1,8,32}
NAME=sweep-${VALUES//,/_}-${LEVELS//,/_}

describe() {  # the pair as a launch description: every flag run_testbed.sh gives its servers
  cat <<EOF
name = "testbed-k${K}-eps${EPS}"
validated = false

[model]
path = "$M/target"

[shared]
enable-metrics = true
dtype = "bfloat16"
attention-backend = "triton"
sampling-backend = "pytorch"
grammar-backend = "none"
decode-log-interval = 16
max-running-requests = 64
cuda-graph-max-bs = 64
cuda-graph-backend-prefill = "disabled"
max-total-tokens = 131072
random-seed = 1

[candidate]
speculative-algorithm = "STANDALONE"
speculative-draft-model-path = "$M/draft"
speculative-num-steps = 3
speculative-eagle-topk = 1
speculative-num-draft-tokens = 4

[memory]
baseline = 0.35
candidate = 0.6

[ports]
baseline = 30000
candidate = 30001

[declared]
gpu = "NVIDIA H200"
precision = "bf16"
notes = "random weights: latencies say nothing about real models"

[launch]
health_timeout_s = 420
EOF
}

sweep_main() {
  rm -rf "$R" && mkdir -p "$R/prompts"
  say "setup (K=$K EPS=$EPS; values $VALUES, levels $LEVELS; the sweep stops at +${DEADLINE_S}s)"
  bash .gpu/setup.sh --variants none || { say "setup failed"; return 1; }
  . .gpu/env.sh
  export PYTHONPATH="$PWD:$PYTHONPATH"
  if [ -f .gpu/jit-cache.tar.gz ]; then
    tar xzf .gpu/jit-cache.tar.gz -C "$HOME" && say "compile caches unpacked"
  fi
  gunzip -c $HERE/prompts_fresh.json.gz > "$R/prompts/fresh-all.json"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$R/nvidia-smi.txt"
  say "building the pair"
  python3 $KIT/build_pair.py "$M" .gpu/tokenizer --k "$K" --eps "$EPS" | tee "$R/pair.json" || return 1
  describe > "$R/pair.toml"
  local left=$(( DEADLINE - $(date +%s) ))
  say "sweep: speculative-num-steps=$VALUES at $LEVELS streams, at most $left s"
  timeout -s INT -k 30 "$left" python3 -m specproxy sweep "$R/prompts/fresh-all.json" \
    --format sharegpt --launch "$R/pair.toml" --vary "speculative-num-steps=$VALUES" \
    --concurrency "$LEVELS" --pairs "${SWEEP_PAIRS:-48}" --fresh-prompts \
    --route generate --output-len 64 --ignore-eos --temperature 0 --drain-s 5 \
    --run-dir "$R/$NAME"
  say "sweep rc=$?"
  mkdir -p "$OUT/$NAME"
  cp "$R/$NAME"/sweep.json "$R/$NAME"/report.* "$R/$NAME"/schedule.json "$OUT/$NAME/" 2>/dev/null
  cp "$R/$NAME"/speculative-adaptive-config.json "$OUT/$NAME/" 2>/dev/null
  sed -n '/^best setting by the median per-pair E2E/,/^$/p' "$R/$NAME/report.txt" 2>/dev/null
}

{ sweep_main; say "main rc=$?"; finish; } 2>&1 | tee "$OUT/run-$NAME.log"
