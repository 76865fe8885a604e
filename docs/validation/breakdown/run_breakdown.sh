#!/usr/bin/env bash
# run_breakdown.sh - one GPU-host call (under 10 minutes): "where the gain goes" on real SGLang
# 0.5.16, on the NEXTN testbed pair of ../nextn/ (a random DeepSeek-V3-shaped target whose own
# MTP layer drafts, EPS sets the acceptance).
#
#   OUT=DIR bash docs/validation/breakdown/run_breakdown.sh   (GPU host, repository root, kit in .gpu/)
#
# 1. setup.sh (bundle only); build_nextn_tracking.py (reused when already built).
# 2. base (30000) and nextn (30001, NEXTN, 3 steps, topk 1, 4 draft tokens), stream_interval 1
#    (SGLang's default), CUDA graphs on, the same flags otherwise.
# 3. estimate_check.py on nextn: greedy /generate streams at concurrency LEVELS, prompts of
#    three lengths; per request the burst estimate against spec_correct_drafts_histogram
#    ($OUT/estimate.jsonl; one summary line per level: match and merged shares, per-position
#    rates both ways).
# 4. specproxy replay, alternate mode, closed loop at CONC, of a native trace whose prompt
#    lengths run from 32 to MAX_INPUT tokens (log-uniform, synthesized with the server's
#    tokenizer, category = length class): once on /generate (EXACT step histogram), once on chat
#    streams (ESTIMATED); `specproxy report` of each into $OUT/report-{generate,chat}/.
# 5. pack: $OUT/run.log, records.tar.gz (both run directories, the trace), sglang-run.tar.gz.
# Environment: EPS (0.01), LEVELS (1,8,32), PER_LEVEL (48), REQUESTS (192 per side per route),
# CONC (8), BLOCK (8), MAX_INPUT (3072), DEADLINE_S (measuring stops this many seconds after the
# start; 540).
# Not run yet: no figures from it are in the README.
set -uo pipefail
: "${OUT:?OUT must name a folder for the result files}"
EPS=${EPS:-0.01}; LEVELS=${LEVELS:-1,8,32}; PER_LEVEL=${PER_LEVEL:-48}; REQUESTS=${REQUESTS:-192}
CONC=${CONC:-8}; BLOCK=${BLOCK:-8}; MAX_INPUT=${MAX_INPUT:-3072}; DEADLINE_S=${DEADLINE_S:-540}
HERE=docs/validation/breakdown
KIT=bench/gpu/breakdown   # its Python scripts
R=/tmp/bd-records
M=/tmp/nx-models/eps-$EPS
B=http://127.0.0.1:30000 C=http://127.0.0.1:30001
t0=$(date +%s); DEADLINE=$(( t0 + DEADLINE_S ))
say() { echo "[bd +$(( $(date +%s) - t0 ))s] $*"; }
left() { echo $(( DEADLINE - $(date +%s) )); }
DECLARE=(--declare gpu="NVIDIA H200" --declare precision=bf16
         --declare target_revision="random-deepseek-v3-seed0-eps$EPS"
         --declare draft_revision="own-nextn-layer")

serve_one() {  # serve_one NAME PORT EXTRA...
  local name=$1 port=$2; shift 2
  bash .gpu/serve.sh "$name" "$port" --cuda-graphs --timeout 320 -- --model-path "$M" \
    --dtype bfloat16 --max-running-requests 64 --cuda-graph-max-bs 64 \
    --max-total-tokens 131072 --mem-fraction-static 0.4 --random-seed 1 "$@" > "$R/serve-$name.out" 2>&1
}

trace() {  # trace FILE: REQUESTS native lines, prompt lengths log-uniform in [32, MAX_INPUT]
  python3 - "$1" "$REQUESTS" "$MAX_INPUT" <<'PY'
import json, math, random, sys
path, n, top = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(11)
with open(path, "w") as out:
    for i in range(n):
        tokens = round(math.exp(rng.uniform(math.log(32), math.log(top))))
        kind = "short" if tokens < 512 else "medium" if tokens < 2048 else "long"
        out.write(json.dumps({"t": i * 0.01, "input_tokens": tokens, "output_tokens": 64,
                              "category": kind}) + "\n")
PY
}

replay() {  # replay ROUTE
  local route=$1 budget; budget=$(left)
  [ "$budget" -gt 30 ] || { say "no time left for the $route replay"; return 1; }
  timeout -s INT -k 20 "$budget" python3 -m specproxy replay "$R/trace.jsonl" --format native \
    --baseline $B --candidate $C --mode alternate --block-size "$BLOCK" --concurrency "$CONC" \
    --route "$route" --ignore-eos --temperature 0 --drain-s 5 "${DECLARE[@]}" \
    --run-dir "$R/replay-$route"
  say "replay $route rc=$?"
  python3 -m specproxy report "$R/replay-$route" --out "$OUT/report-$route" > /dev/null
  python3 -m specproxy report "$R/replay-$route" | sed -n '/^Where the gain goes/,/^Output agreement/p'
}

main() {
  rm -rf "$R" && mkdir -p "$R"
  say "setup (EPS=$EPS, measuring stops at +${DEADLINE_S}s)"
  bash .gpu/setup.sh --variants none > "$R/setup.log" 2>&1 || { tail -20 "$R/setup.log"; return 1; }
  . .gpu/env.sh
  export PYTHONPATH="$PWD:$PYTHONPATH"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$R/nvidia-smi.txt"
  gunzip -c docs/validation/testbed/prompts_fresh.json.gz > "$R/prompts.json"
  python3 bench/gpu/nextn/build_nextn_tracking.py "$M" .gpu/tokenizer --eps "$EPS" 2>&1 \
    | grep -v -i warn | tee "$R/build.json"
  say "servers base + nextn (together, 5 s apart)"
  serve_one base 30000 & local pb=$!
  sleep 5
  serve_one nextn 30001 --speculative-algorithm NEXTN --speculative-num-steps 3 \
    --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 & local pc=$!
  wait $pb; local b_ok=$?; wait $pc; local c_ok=$?
  cat "$R"/serve-*.out
  [ $b_ok = 0 ] && [ $c_ok = 0 ] || { say "a server did not come up"; return 1; }
  curl -s "$C/server_info" > "$R/nextn-server_info.json"
  say "servers up; stream_interval $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("stream_interval"))' "$R/nextn-server_info.json")"
  timeout -k 10 "$(( $(left) / 3 ))" python3 $KIT/estimate_check.py --url $C \
    --prompts "$R/prompts.json" --levels "$LEVELS" --requests "$PER_LEVEL" --out "$OUT/estimate.jsonl"
  say "estimate check rc=$?"
  trace "$R/trace.jsonl"
  replay generate
  replay chat
}

finish() {
  say "packing"
  rm -f "$R/prompts.json"   # in the repository already
  tar czf "$OUT/records.tar.gz" -C "$R" . 2>/dev/null
  bash .gpu/collect.sh "$OUT" > /dev/null 2>&1
  bash .gpu/stop_all.sh > /dev/null 2>&1
  say "end"
}

{ main; say "main rc=$?"; finish; } 2>&1 | tee "$OUT/run.log"
