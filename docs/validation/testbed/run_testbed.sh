#!/usr/bin/env bash
# run_testbed.sh - one GPU-host call: the GPU-bound testbed pair on real SGLang 0.5.16, the level
# loop (specproxy alternate replay + SGLang bench_serving ground truth) and the proxy overhead.
#
#   OUT=DIR bash docs/validation/testbed/run_testbed.sh      (GPU host, repository root, kit in .gpu/)
#
# Steps, each timed in DIR/run.log:
#   1. setup.sh (bundle, no kit models), build_pair.py: 5.7B random Llama target with layers >= K
#      scaled by EPS in their residual writes, and its first-K-layers STANDALONE draft.
#   2. servers, decode CUDA graphs on (prefill graphs off on all three, the same on every side):
#      base (30000) and the CANDIDATES (STANDALONE 30001, NGRAM 30002) started together, 5 s
#      apart (SGLang's tvm-ffi JIT builds take a file lock and triton writes its cache
#      atomically, so cold servers share the compile caches safely; a candidate that fails is
#      started once more alone). Every server: --max-running-requests 64, --cuda-graph-max-bs 64,
#      --max-total-tokens 131072 (the same KV capacity on every side, which also makes a
#      simultaneous start safe), --mem-fraction-static 0.7.
#   3. the level loop (run_levels.py): STANDALONE at 1, 4, 16, 64 streams first.
#   4. proxy overhead (proxy_overhead.py): direct vs `specproxy serve` passthrough and mirror at
#      1, 16, 64 streams. The mirror's shadow goes to a `specproxy sim` candidate on the CPU, so
#      the figure is the proxy's own cost, not a second GPU workload sharing the baseline's GPU.
#   5. the rest of the level loop while time is left: NGRAM at 1, 16, 64, 4, then STANDALONE at
#      2, 8, 32, then NGRAM at 2, 8, 32.
#   6. pack and stop: DIR/records.tar.gz (run directories, bench_serving lines, prompts),
#      DIR/sglang-run.tar.gz (server logs), DIR/results.jsonl (one line per step, written as it
#      happens), DIR/run.log.
# Environment: K (2), EPS (0.05), DEADLINE_S (seconds after start at which measuring stops; 540),
# CANDIDATES ("standalone ngram"), LEVELS_FIRST, LEVELS_REST (plans for run_levels.py),
# SKIP_PROXY=1, PROXY_FIRST=1 (proxy overhead before the first levels), PROXY_ROUNDS (9),
# NO_REPLAY=1 (run only the bench_serving ground truth), FRESH=1 (no prompt sent twice: the
# levels take prompts_fresh.json.gz from entry FRESH_FROM (450) on, run_levels.py --fresh-from;
# $R/prompts/fresh-sweep.json holds the entries before it, for a sweep with --fresh-prompts),
# EXTRA_STEP (a command run once the servers are up and warm, before the levels, with B, S, N, R,
# M and DEADLINE set: the place for `specproxy sweep`; its output belongs under $R so that it is
# packed). Compile caches: .gpu/jit-cache.tar.gz, when present, is unpacked into $HOME before
# the servers start; JIT_CACHE_OUT=1 packs $HOME's tvm-ffi and triton caches into
# DIR/jit-cache.tar.gz at the end (carry it to the next call as .gpu/jit-cache.tar.gz).
set -uo pipefail
: "${OUT:?OUT must name a folder for the result files}"
K=${K:-2}; EPS=${EPS:-0.05}; DEADLINE_S=${DEADLINE_S:-540}
LEVELS_FIRST=${LEVELS_FIRST:-"standalone:1,4,16,64"}
LEVELS_REST=${LEVELS_REST:-"ngram:1,16,64,4 standalone:2,8,32 ngram:2,8,32"}
CANDIDATES=${CANDIDATES:-"standalone ngram"}
FRESH_FROM=${FRESH_FROM:-450}
HERE=docs/validation/testbed
KIT=bench/gpu/testbed   # its Python scripts
PROMPTS=$HERE/prompts_sharegpt128.json
R=/tmp/tb-records
M=/tmp/tb-models/k${K}-eps${EPS}
t0=$(date +%s); DEADLINE=$(( t0 + DEADLINE_S ))
say() { echo "[tb +$(( $(date +%s) - t0 ))s] $*"; }
B=http://127.0.0.1:30000 S=http://127.0.0.1:30001 N=http://127.0.0.1:30002

COMMON=()
serve_one() {  # serve_one NAME PORT TIMEOUT: one server with the common flags (and its own)
  local extra=()
  case $1 in
    standalone) extra=(--speculative-algorithm STANDALONE --speculative-draft-model-path "$M/draft"
                       --speculative-num-steps 3 --speculative-eagle-topk 1
                       --speculative-num-draft-tokens 4) ;;
    ngram) extra=(--speculative-algorithm NGRAM) ;;
  esac
  bash .gpu/serve.sh "$1" "$2" --cuda-graphs --timeout "$3" -- "${COMMON[@]}" "${extra[@]}" \
    > "$R/serve-$1.out" 2>&1
}

start_servers() {
  COMMON=(--model-path "$M/target" --dtype bfloat16 --max-running-requests 64
          --cuda-graph-max-bs 64 --cuda-graph-backend-prefill disabled
          --max-total-tokens 131072 --mem-fraction-static 0.7 --random-seed 1)
  local pb ps= pn= b_ok
  say "servers base + $CANDIDATES (together, 5 s apart)"
  serve_one base 30000 330 & pb=$!
  case " $CANDIDATES " in *" standalone "*) sleep 5; serve_one standalone 30001 330 & ps=$! ;; esac
  case " $CANDIDATES " in *" ngram "*) sleep 5; serve_one ngram 30002 330 & pn=$! ;; esac
  wait $pb; b_ok=$?
  [ -n "$ps" ] && { wait $ps; S_OK=$?; }
  [ -n "$pn" ] && { wait $pn; N_OK=$?; }
  cat "$R"/serve-*.out
  [ $b_ok = 0 ] || { say "baseline did not come up"; return 1; }
  if [ -n "$ps" ] && [ $S_OK != 0 ]; then say "standalone again, alone"; serve_one standalone 30001 200; S_OK=$?; fi
  if [ -n "$pn" ] && [ $N_OK != 0 ]; then say "ngram again, alone"; serve_one ngram 30002 200; N_OK=$?; fi
  sglkit_servers_json
  say "standalone ok=$(( S_OK == 0 )) ngram ok=$(( N_OK == 0 ))"
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv | tee "$R/gpu-memory.txt"
  [ $S_OK = 0 ] || [ $N_OK = 0 ]
}

levels() {  # levels PLAN... : one run_levels.py call over the plan entries whose server is up
  local args=() servers=() p
  [ "$S_OK" = 0 ] && servers+=(--server standalone=$S)
  [ "$N_OK" = 0 ] && servers+=(--server ngram=$N)
  for p in "$@"; do
    case $p in
      standalone:*) [ "$S_OK" = 0 ] && args+=(--plan "$p") ;;
      ngram:*) [ "$N_OK" = 0 ] && args+=(--plan "$p") ;;
    esac
  done
  [ ${#args[@]} -gt 0 ] || [ -n "${WARM:-}" ] || return 0
  python3 $KIT/run_levels.py --baseline $B "${servers[@]}" "${args[@]}" \
    --prompts "$PROMPTS" ${FRESH:+--fresh-from $FRESH_FROM} --records $R --results "$OUT/results.jsonl" \
    --tokenizer "$M/target" --reps 3 --output-len 64 --deadline $DEADLINE --tar "$OUT/records.tar.gz" \
    ${NO_REPLAY:+--no-replay} ${WARM:+--warmup} \
    --declare gpu="NVIDIA H200" --declare precision=bf16 \
    --declare target_revision="random-seed0-k${K}-eps${EPS}" --declare draft_revision="first-${K}-layers-of-target"
}

proxy_overhead() {
  local pids=() mode port
  python3 -m specproxy sim --port 30100 --model-path "$M/target" --algorithm standalone \
    --speculative-draft-model-path "$M/draft" --speculative-num-steps 3 --speculative-eagle-topk 1 \
    --speculative-num-draft-tokens 4 --max-running-requests 64 --decode-step-ms 4 --verify-step-ms 5 \
    --accept-prob 0.5 > "$R/sim-candidate.log" 2>&1 &
  pids+=($!)
  for mode in passthrough mirror; do
    port=8101; [ $mode = mirror ] && port=8102
    python3 -m specproxy serve --baseline $B --candidate http://127.0.0.1:30100 --mode $mode \
      --port $port --run-dir "$R/proxy-$mode" --drain-s 2 > "$R/proxy-$mode.log" 2>&1 &
    pids+=($!)
  done
  for port in 30100 8101 8102; do
    for _ in $(seq 1 60); do sglkit_healthy $port && break; sleep 0.5; done
  done
  say "proxies up"
  python3 $KIT/proxy_overhead.py $HERE/prompts_sharegpt128.json "$OUT/results.jsonl" "$R/proxy" \
    --arm direct=$B --arm passthrough=http://127.0.0.1:8101 --arm mirror=http://127.0.0.1:8102 \
    --levels 1,16,64 --rounds "${PROXY_ROUNDS:-9}" --output-len 64 --deadline $DEADLINE
  kill -TERM "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
}

finish() {
  say "packing"
  grep -h -E "Decode batch|accept len" "$SGLKIT_RUN"/*.log 2>/dev/null | tail -3
  rm -f "$R"/prompts/fresh-all.json   # the whole fresh set is in the repository already
  tar czf "$OUT/records.tar.gz" -C "$R" . 2>/dev/null
  bash .gpu/collect.sh "$OUT" > /dev/null 2>&1
  bash .gpu/stop_all.sh > /dev/null 2>&1
  if [ -n "${JIT_CACHE_OUT:-}" ]; then
    (cd "$HOME" && du -sh .cache/* .triton/* 2>/dev/null)   # paths relative to $HOME
    tar czf "$OUT/jit-cache.tar.gz" -C "$HOME" $(cd "$HOME" && ls -d .cache/tvm-ffi .triton/cache 2>/dev/null)
    echo "jit-cache.tar.gz: $(stat -c %s "$OUT/jit-cache.tar.gz") bytes"
  fi
  say "end"
}

main() {
  rm -rf "$R" && mkdir -p "$R"
  S_OK=1; N_OK=1
  say "setup (K=$K EPS=$EPS, measuring stops at +${DEADLINE_S}s)"
  bash .gpu/setup.sh --variants none || { say "setup failed"; return 1; }
  . .gpu/env.sh
  export PYTHONPATH="$PWD:$PYTHONPATH"
  if [ -f .gpu/jit-cache.tar.gz ]; then
    tar xzf .gpu/jit-cache.tar.gz -C "$HOME" && say "compile caches unpacked from .gpu/jit-cache.tar.gz"
  fi
  if [ -n "${FRESH:-}" ]; then
    mkdir -p "$R/prompts"
    PROMPTS=$R/prompts/fresh-all.json
    gunzip -c $HERE/prompts_fresh.json.gz > "$PROMPTS"
    python3 -c "import json, sys; e = json.load(open(sys.argv[1])); json.dump(e[:int(sys.argv[3])], open(sys.argv[2], 'w'))" \
      "$PROMPTS" "$R/prompts/fresh-sweep.json" "$FRESH_FROM"
    say "fresh prompts: the sweep's first $FRESH_FROM in $R/prompts/fresh-sweep.json, the levels' from $FRESH_FROM on"
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$R/nvidia-smi.txt"
  say "building the pair"
  python3 $KIT/build_pair.py "$M" .gpu/tokenizer --k "$K" --eps "$EPS" | tee "$R/pair.json" || return 1
  start_servers || { say "no speculative server came up"; return 1; }
  if [ -n "${EXTRA_STEP:-}" ]; then
    say "warm-up and extra step"
    WARM=1 levels; export B S N R M DEADLINE; bash -c "$EXTRA_STEP"; say "extra step rc=$?"
  fi
  say "levels (first)"
  warm=1; [ -z "${EXTRA_STEP:-}" ] || warm=
  if [ -n "${PROXY_FIRST:-}" ] && [ -z "${SKIP_PROXY:-}" ]; then say "proxy overhead"; proxy_overhead; fi
  read -r -a first <<< "$LEVELS_FIRST"; WARM=$warm levels "${first[@]}"
  if [ -z "${SKIP_PROXY:-}${PROXY_FIRST:-}" ] && [ $(( $(date +%s) + 40 )) -lt $DEADLINE ]; then
    say "proxy overhead"; proxy_overhead
  fi
  say "levels (rest)"
  read -r -a rest <<< "$LEVELS_REST"; levels "${rest[@]}"
}

# TB_LIB=1 defines the functions only (for trying them against simulators).
[ -n "${TB_LIB:-}" ] || { { main; say "main rc=$?"; finish; } 2>&1 | tee "$OUT/run.log"; }
