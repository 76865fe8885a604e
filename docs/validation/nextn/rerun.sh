#!/usr/bin/env bash
# rerun.sh - the NEXTN testbed pair launched by `specproxy launch`, swept twice on fresh server
# instances with SGLang's bench_serving beside each sweep, then the EAGLE alias and two
# mislabels. Made for several GPU-host calls on one warm machine: every call runs the steps
# named in STEPS, in order, skips what is already done (state under /tmp/nx-rerun), stops
# starting steps DEADLINE_S seconds after its own start, and packs everything into $OUT.
#
#   OUT=DIR STEPS="up1 check sweep1 bench1" bash docs/validation/nextn/rerun.sh
#   OUT=DIR STEPS="bench1 restart sweep2 bench2" bash docs/validation/nextn/rerun.sh
#   OUT=DIR STEPS="bench2 alias simacc refused" bash docs/validation/nextn/rerun.sh
#
# Steps:
#   up1, up2   setup.sh (bundle only), build_nextn_tracking.py (EPS, reused), then
#              `specproxy launch deploy/sglang/testbed-nextn.toml -- sleep` in a session of its
#              own (the pair outlives the call); waits until both servers answer /health.
#   check      `specproxy check --expect-algorithm NEXTN` (JSON and text), raw captures of both
#              servers (the kit's capture.py), /server_info and /metrics of the candidate.
#   sweepN     warm-up, then `specproxy sweep` over LEVELS (64-token greedy outputs,
#              ignore_eos) for at most SWEEP_S seconds (SIGINT: finished levels are kept).
#   benchN     bench_serving on each server alone, REPS reps ABAB per level, same prompts, for
#              the levels run N has not finished (run_levels.py --no-replay).
#   restart    stops launch 1 (SIGTERM: the pair stops) and does up2: fresh server instances.
#   alias      the same weights as --speculative-algorithm EAGLE on port 30002 (serve.sh):
#              `specproxy check --expect-algorithm EAGLE`, /server_info, accept length at
#              1 stream on both candidates (measure_accept.py); then stopped.
#   simacc     the NEXTN candidate started with SGLANG_SIMULATE_ACC_LEN=2.5 on port 30002:
#              `specproxy check`, accept length, greedy outputs against the baseline's.
#   refused    `specproxy launch docs/validation/nextn/tiny-llama-nextn-refused.toml`: NEXTN
#              on a Llama target with no MTP layers (expected: rejected, rc 1).
# Environment: EPS (0.01), LEVELS (1,2,4,8,16,32,64), REPS (3), SWEEP_S (230), DEADLINE_S (540),
# BLOCK (8), PAIRS (42).
set -uo pipefail
: "${OUT:?OUT must name a folder for the result files}"
STEPS=${STEPS:-"up1 check sweep1 bench1"}
EPS=${EPS:-0.01}; LEVELS=${LEVELS:-1,2,4,8,16,32,64}; REPS=${REPS:-3}; SWEEP_S=${SWEEP_S:-230}
DEADLINE_S=${DEADLINE_S:-540}; BLOCK=${BLOCK:-8}; PAIRS=${PAIRS:-42}
HERE=docs/validation/nextn
KIT=bench/gpu/nextn
DESC=deploy/sglang/testbed-nextn.toml
R=/tmp/nx-rerun
M=/tmp/nx-models/eps-$EPS
B=http://127.0.0.1:30000 C=http://127.0.0.1:30001 X=http://127.0.0.1:30002
t0=$(date +%s); DEADLINE=$(( t0 + DEADLINE_S ))
say() { echo "[rr +$(( $(date +%s) - t0 ))s] $*"; }
left() { echo $(( DEADLINE - $(date +%s) )); }
mkdir -p "$R/prompts"

healthy() { [ "$(curl -s -m 3 -o /dev/null -w '%{http_code}' "$1/health")" = 200 ]; }

setup_once() {
  bash .gpu/setup.sh --variants "${1:-none}" > "$R/setup.log" 2>&1 || { tail -20 "$R/setup.log"; return 1; }
  . .gpu/env.sh
  export PYTHONPATH="$PWD:$PYTHONPATH"
  [ -f "$R/prompts/fresh-all.json" ] || gunzip -c docs/validation/testbed/prompts_fresh.json.gz > "$R/prompts/fresh-all.json"
  [ -f "$R/nvidia-smi.txt" ] || nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$R/nvidia-smi.txt"
}

up() {  # up N: launch pair N unless it is up
  local n=$1 dir=$R/launch$1
  if [ -f "$dir.pid" ] && kill -0 "$(cat "$dir.pid")" 2>/dev/null && healthy $B && healthy $C; then
    say "pair $n already up"; return 0
  fi
  [ -f "$M/config.json" ] || python3 $KIT/build_nextn_tracking.py "$M" .gpu/tokenizer --eps "$EPS" 2>&1 \
    | grep -v -i warn | tee "$R/build.json"
  rm -rf "$dir"
  say "launching pair $n"
  setsid python3 -m specproxy launch "$DESC" --run-dir "$dir" -- sleep 86400 > "$dir.out" 2>&1 < /dev/null &
  echo $! > "$dir.pid"
  local w=0
  until healthy $B && healthy $C; do
    kill -0 "$(cat "$dir.pid")" 2>/dev/null || { say "launch $n exited"; tail -30 "$dir.out"; return 1; }
    [ $w -ge 460 ] && { say "pair $n not healthy after $w s"; tail -30 "$dir.out"; return 1; }
    sleep 2; w=$(( w + 2 ))
  done
  say "pair $n up after $w s"
}

stop_launch() {  # stop_launch N
  local pid; pid=$(cat "$R/launch$1.pid" 2>/dev/null) || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  for _ in $(seq 1 30); do healthy $B || healthy $C || break; sleep 1; done
  say "launch $1 stopped"
}

warmup() {
  python3 bench/gpu/testbed/run_levels.py --baseline $B --server nextn=$C --warmup \
    --prompts "$R/prompts/fresh-all.json" --records "$R/warm" --results "$R/warmup.jsonl" \
    --tokenizer "$M" --no-replay --no-bench --output-len 64 > "$R/warmup.log" 2>&1
}

sweep() {  # sweep N
  local n=$1 budget; budget=$(left); [ "$budget" -gt "$SWEEP_S" ] && budget=$SWEEP_S
  [ -f "$R/run$n/sweep.done" ] && { say "sweep $n done already"; return 0; }
  [ "$budget" -lt 60 ] && { say "sweep $n: only $budget s left"; return 1; }
  mkdir -p "$R/run$n"; warmup
  say "sweep $n at $LEVELS for at most $budget s"
  SPECPROXY_RUN_DIR=$R/launch$n timeout -s INT -k 20 "$budget" python3 -m specproxy sweep \
    "$R/prompts/fresh-all.json" --format sharegpt --baseline $B --candidate $C \
    --concurrency "$LEVELS" --pairs "$PAIRS" --block-size "$BLOCK" --route generate \
    --output-len 64 --ignore-eos --temperature 0 --drain-s 5 --run-dir "$R/run$n/sweep-nextn" \
    > "$R/run$n/sweep.out" 2>&1
  say "sweep $n rc=$?"; tail -25 "$R/run$n/sweep.out"
  touch "$R/run$n/sweep.done"
}

bench() {  # bench N: the levels run N has not finished
  local n=$1 todo
  mkdir -p "$R/run$n"; touch "$R/run$n/results.jsonl"
  todo=$(python3 - "$R/run$n/results.jsonl" "$LEVELS" <<'PY'
import json, sys
done = {json.loads(x).get("level") for x in open(sys.argv[1]) if '"level_done"' in x}
print(",".join(v for v in sys.argv[2].split(",") if int(v) not in done))
PY
)
  [ -z "$todo" ] && { say "bench $n done already"; return 0; }
  say "bench $n at $todo"
  python3 bench/gpu/testbed/run_levels.py --baseline $B --server nextn=$C --plan "nextn:$todo" \
    --prompts "$R/prompts/fresh-all.json" --records "$R/run$n" --results "$R/run$n/results.jsonl" \
    --tokenizer "$M" --reps "$REPS" --output-len 64 --deadline "$DEADLINE" --no-replay \
    > "$R/run$n/bench.out" 2>&1
  say "bench $n rc=$?"; grep -E "^bench|skipped" "$R/run$n/bench.out" | tail -8
}

check() {
  [ -f "$R/check.done" ] && return 0
  mkdir -p "$R/captures"
  SPECPROXY_RUN_DIR=$R/launch1 python3 -m specproxy check --baseline $B --candidate $C \
    --expect-algorithm NEXTN --json > "$R/check-nextn.json" 2> "$R/check-nextn.err"
  echo "check rc=$?"
  SPECPROXY_RUN_DIR=$R/launch1 python3 -m specproxy check --baseline $B --candidate $C \
    --expect-algorithm NEXTN > "$R/check-nextn.txt" 2>&1; cat "$R/check-nextn.txt"
  python3 .gpu/capture.py fixtures 30001 "$R/captures/nextn" nextn > "$R/captures/nextn.log" 2>&1
  python3 .gpu/capture.py fixtures 30000 "$R/captures/base" base > "$R/captures/base.log" 2>&1
  curl -s "$C/server_info" > "$R/captures/nextn-server_info.json"
  curl -s "$C/metrics" > "$R/captures/nextn-metrics.txt"
  touch "$R/check.done"; say "check and captures done"
}

serve_x() {  # serve_x NAME [ENV=V...] -- EXTRA...: the third server, port 30002
  local name=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" bash .gpu/serve.sh "$name" 30002 --cuda-graphs --timeout 240 -- --model-path "$M" \
    --dtype bfloat16 --max-running-requests 16 --cuda-graph-max-bs 16 --max-total-tokens 65536 \
    --mem-fraction-static 0.85 --random-seed 1 --enable-metrics "$@" > "$R/serve-$name.out" 2>&1
  local rc=$?; cat "$R/serve-$name.out"; return $rc
}
stop_x() {  # stop_x NAME
  local pid; pid=$(cat "$SGLKIT_RUN/$1.pid" 2>/dev/null) || return 0
  kill -TERM -- "-$pid" 2>/dev/null
  for _ in $(seq 1 40); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$pid" 2>/dev/null; cp "$SGLKIT_RUN/$1.log" "$SGLKIT_RUN/$1.cmd" "$R/" 2>/dev/null
  say "$1 stopped"
}

accept() {  # accept URL LABEL
  python3 $KIT/measure_accept.py "$1" docs/validation/testbed/prompts_sharegpt128.json --n 16 \
    --concurrency 1 --max-new-tokens 64 --warmup 2 --label "$2" --out "$R/accept.jsonl"
}

alias_step() {
  [ -f "$R/alias.done" ] && return 0
  serve_x eagle -- --speculative-algorithm EAGLE --speculative-num-steps 3 \
    --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 || { stop_x eagle; return 1; }
  curl -s "$X/server_info" > "$R/captures/eagle-alias-server_info.json"
  python3 -m specproxy check --baseline $B --candidate $X --expect-algorithm EAGLE > "$R/check-eagle-alias.txt" 2>&1; echo "check eagle rc=$?"
  python3 -m specproxy check --baseline $B --candidate $X --expect-algorithm NEXTN --json > "$R/check-eagle-alias-as-nextn.json" 2>&1
  cat "$R/check-eagle-alias.txt"
  accept $X eagle-alias; accept $C nextn
  stop_x eagle; touch "$R/alias.done"
}

simacc_step() {
  [ -f "$R/simacc.done" ] && return 0
  serve_x simacc SGLANG_SIMULATE_ACC_LEN=2.5 -- --speculative-algorithm NEXTN \
    --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \
    || { stop_x simacc; return 1; }
  python3 -m specproxy check --baseline $B --candidate $X --expect-algorithm NEXTN > "$R/check-simacc.txt" 2>&1; echo "check simacc rc=$?"
  python3 -m specproxy check --baseline $B --candidate $X --expect-algorithm NEXTN --json > "$R/check-simacc.json" 2>&1
  cat "$R/check-simacc.txt"
  accept $X simacc
  python3 - "$B" "$X" > "$R/simacc-greedy.json" <<'PY'
import json, sys, urllib.request
out = []
for text in ["The capital of France is", "def fibonacci(n):", "Once upon a time"]:
    row = {"prompt": text}
    for name, url in (("baseline", sys.argv[1]), ("simacc", sys.argv[2])):
        body = json.dumps({"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": 24}}).encode()
        req = urllib.request.Request(url + "/generate", body, {"Content-Type": "application/json"})
        doc = json.load(urllib.request.urlopen(req, timeout=60))
        row[name] = doc["text"]; row[name + "_accept"] = doc["meta_info"].get("spec_accept_length")
    out.append(row)
print(json.dumps(out, indent=1))
PY
  head -c 1500 "$R/simacc-greedy.json"; echo
  stop_x simacc; touch "$R/simacc.done"
}

refused_step() {
  [ -f "$R/refused.done" ] && return 0
  setup_once random || return 1
  rm -rf "$R/refused"
  timeout 300 python3 -m specproxy launch $HERE/tiny-llama-nextn-refused.toml --run-dir "$R/refused" \
    > "$R/refused.out" 2>&1
  say "refused launch rc=$? (expected 1)"; tail -15 "$R/refused.out"
  touch "$R/refused.done"
}

run_step() {
  case $1 in
    up1) up 1 ;;
    up2) up 2 ;;
    check) check ;;
    sweep1) sweep 1 ;;
    sweep2) sweep 2 ;;
    bench1) bench 1 ;;
    bench2) bench 2 ;;
    restart) [ -f "$R/launch2.pid" ] || stop_launch 1; up 2 ;;
    alias) alias_step ;;
    simacc) simacc_step ;;
    refused) refused_step ;;
    *) say "unknown step $1" ;;
  esac
}

main() {
  say "steps: $STEPS (deadline +${DEADLINE_S}s)"
  setup_once none || return 1
  for s in $STEPS; do
    if [ "$(left)" -lt 30 ]; then say "skipped $s: deadline"; continue; fi
    say "step $s"; run_step "$s"; say "step $s rc=$?"
  done
  grep -h "accept len" "$R"/launch*/logs/candidate.log 2>/dev/null | tail -2
}

finish() {
  say "packing"
  cp "$R"/run1/results.jsonl "$OUT/results-run1.jsonl" 2>/dev/null
  cp "$R"/run2/results.jsonl "$OUT/results-run2.jsonl" 2>/dev/null
  tar czf "$OUT/records.tar.gz" --exclude=prompts --exclude='*.safetensors' -C "$R" . 2>/dev/null
  tar czf "$OUT/sglang-run.tar.gz" -C "${SGLKIT_RUN:-/tmp/sglang-kit/run}" . 2>/dev/null
  ls -la "$OUT"
  say "end"
}

{ main; say "main rc=$?"; finish; } 2>&1 | tee "$OUT/run.log"
