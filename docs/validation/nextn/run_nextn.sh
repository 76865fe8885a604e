#!/usr/bin/env bash
# run_nextn.sh - one GPU-host call: the NEXTN (built-in MTP) testbed pair on real SGLang 0.5.16,
# specproxy's preflight and sweep against it, SGLang's bench_serving beside it, raw captures.
#
#   OUT=DIR bash docs/validation/nextn/run_nextn.sh      (GPU host, repository root, kit in .gpu/)
#
# 1. setup.sh (bundle only); build_nextn_tracking.py: a random DeepSeek-V3-shaped target (MLA,
#    MoE, 30 layers, hidden 4096, 5.9B parameters) whose own NextN layer tracks it (EPS, K = 1).
# 2. base (30000, no speculation) and nextn (30001, --speculative-algorithm NEXTN, 3 steps, topk 1,
#    4 draft tokens, no draft path) started together, CUDA graphs on, the same flags otherwise.
# 3. `specproxy check` on the pair (JSON), capture.py's raw exchanges from both servers.
# 4. `specproxy sweep` over LEVELS (fixed 64-token outputs, greedy, ignore_eos), SIGINT at the
#    measuring deadline minus RESERVE_S, so bench_serving keeps its share.
# 5. bench_serving on each server alone, REPS reps ABAB per level, same prompts (run_levels.py
#    --no-replay), until the deadline.
# 6. pack: $OUT/run.log, results.jsonl (one line per bench step), records.tar.gz (sweep, bench
#    lines, check JSON, captures, prompts), sglang-run.tar.gz (server logs and commands).
# Environment: EPS (0.01), LEVELS (1,4,16,64), REPS (3), DEADLINE_S (measuring stops this many
# seconds after the start; 370), RESERVE_S (seconds kept for bench_serving; 80), BLOCK (8),
# PAIRS (42).
set -uo pipefail
: "${OUT:?OUT must name a folder for the result files}"
EPS=${EPS:-0.01}; LEVELS=${LEVELS:-1,4,16,64}; REPS=${REPS:-3}
DEADLINE_S=${DEADLINE_S:-370}; RESERVE_S=${RESERVE_S:-80}; BLOCK=${BLOCK:-8}; PAIRS=${PAIRS:-42}
HERE=docs/validation/nextn
KIT=bench/gpu/nextn   # its Python scripts
R=/tmp/nx-records
M=/tmp/nx-models/eps-$EPS
B=http://127.0.0.1:30000 C=http://127.0.0.1:30001
t0=$(date +%s); DEADLINE=$(( t0 + DEADLINE_S ))
say() { echo "[nx +$(( $(date +%s) - t0 ))s] $*"; }
DECLARE=(--declare gpu="NVIDIA H200" --declare precision=bf16
         --declare target_revision="random-deepseek-v3-seed0-eps$EPS"
         --declare draft_revision="own-nextn-layer")

serve_one() {  # serve_one NAME PORT EXTRA...
  local name=$1 port=$2; shift 2
  bash .gpu/serve.sh "$name" "$port" --cuda-graphs --timeout 320 -- --model-path "$M" \
    --dtype bfloat16 --max-running-requests 64 --cuda-graph-max-bs 64 \
    --max-total-tokens 131072 --mem-fraction-static 0.4 --random-seed 1 "$@" > "$R/serve-$name.out" 2>&1
}

main() {
  rm -rf "$R" && mkdir -p "$R/prompts" "$R/bench"
  say "setup (EPS=$EPS, measuring stops at +${DEADLINE_S}s)"
  bash .gpu/setup.sh --variants none > "$R/setup.log" 2>&1 || { tail -20 "$R/setup.log"; return 1; }
  . .gpu/env.sh
  export PYTHONPATH="$PWD:$PYTHONPATH"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$R/nvidia-smi.txt"
  gunzip -c docs/validation/testbed/prompts_fresh.json.gz > "$R/prompts/fresh-all.json"
  python3 $KIT/build_nextn_tracking.py "$M" .gpu/tokenizer --eps "$EPS" 2>&1 | grep -v -i warn \
    | tee "$R/build.json"
  say "servers base + nextn (together, 5 s apart)"
  serve_one base 30000 & local pb=$!
  sleep 5
  serve_one nextn 30001 --speculative-algorithm NEXTN --speculative-num-steps 3 \
    --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 & local pc=$!
  wait $pb; local b_ok=$?; wait $pc; local c_ok=$?
  cat "$R"/serve-*.out
  sglkit_servers_json
  [ $b_ok = 0 ] && [ $c_ok = 0 ] || { say "a server did not come up"; return 1; }
  say "servers up"
  python3 -m specproxy check --baseline $B --candidate $C --expect-algorithm NEXTN --json > "$R/check-nextn.json" 2> "$R/check-nextn.err"
  echo "check rc=$?"; head -c 3000 "$R/check-nextn.json"; echo
  python3 -m specproxy check --baseline $B --candidate $C > "$R/check-nextn.txt" 2>&1
  mkdir -p "$R/captures"
  python3 .gpu/capture.py fixtures 30001 "$R/captures/nextn" nextn > "$R/captures/nextn.log" 2>&1
  python3 .gpu/capture.py fixtures 30000 "$R/captures/base" base > "$R/captures/base.log" 2>&1
  curl -s "$C/server_info" > "$R/captures/nextn-server_info.json"
  curl -s "$C/metrics" > "$R/captures/nextn-metrics.txt"
  say "check and captures done"
  # warm-up: 8 requests at 8 streams on each server (graphs and caches, not measured)
  python3 bench/gpu/testbed/run_levels.py --baseline $B --server nextn=$C --warmup \
    --prompts "$R/prompts/fresh-all.json" --records "$R" --results "$R/warmup.jsonl" \
    --tokenizer "$M" --no-replay --no-bench --output-len 64 > "$R/warmup.log" 2>&1
  local left=$(( DEADLINE - RESERVE_S - $(date +%s) ))
  say "sweep at $LEVELS for at most $left s"
  timeout -s INT -k 20 "$left" python3 -m specproxy sweep "$R/prompts/fresh-all.json" \
    --format sharegpt --baseline $B --candidate $C --concurrency "$LEVELS" --pairs "$PAIRS" \
    --block-size "$BLOCK" --route generate --output-len 64 --ignore-eos --temperature 0 \
    --drain-s 5 "${DECLARE[@]}" --run-dir "$R/sweep-nextn"
  say "sweep rc=$?"
  python3 bench/gpu/testbed/run_levels.py --baseline $B --server nextn=$C \
    --plan "nextn:$LEVELS" --prompts "$R/prompts/fresh-all.json" --records "$R" \
    --results "$OUT/results.jsonl" --tokenizer "$M" --reps "$REPS" --output-len 64 \
    --deadline $DEADLINE --no-replay --tar "$OUT/records.tar.gz" "${DECLARE[@]}"
  say "bench done"
  grep -h -E "accept len" "$SGLKIT_RUN"/nextn.log 2>/dev/null | tail -3
}

finish() {
  say "packing"
  rm -f "$R/prompts/fresh-all.json"   # in the repository already
  tar czf "$OUT/records.tar.gz" -C "$R" . 2>/dev/null
  bash .gpu/collect.sh "$OUT" > /dev/null 2>&1
  bash .gpu/stop_all.sh > /dev/null 2>&1
  say "end"
}

{ main; say "main rc=$?"; finish; } 2>&1 | tee "$OUT/run.log"
