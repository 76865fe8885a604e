#!/usr/bin/env bash
# run_distribution.sh - one GPU-host call: the output-distribution check on real SGLang 0.5.16.
# The testbed's STANDALONE pair (bench/gpu/testbed/build_pair.py, K = 2, EPS = 0.05), one
# baseline and the same STANDALONE candidate twice: accept thresholds 1.0 (lossless) and relaxed
# (--speculative-accept-threshold-single/-acc RELAXED, 0.3). Sampled traffic (temperature TEMP,
# 0.7), scored with `replay --score-requests`; an A/A run (the baseline on both sides) is the
# noise floor both comparisons are judged against.
#
#   OUT=DIR bash docs/validation/distribution/run_distribution.sh  (GPU host, repository root, kit in .gpu/)
#
# 1. setup.sh (bundle only), build_pair.py (17.5 s, then saving 11 GB).
# 2. base (30000), strict (30001, thresholds 1.0) and relaxed (30003) started together, 5 s apart,
#    with run_testbed.sh's common flags (CUDA graphs on, --max-total-tokens 131072 on every side).
# 3. `specproxy check` on each pair (JSON; the relaxed one must be named lossy by configuration),
#    and two raw teacher-forced requests to the baseline (max_new_tokens 0 and 1, 11 token ids
#    below the kit's 4096-token vocabulary,
#    logprob_start_len 4), kept as probe-scoring-N.json: what 0.5.16 accepts and returns.
# 4. In STEPS order (default "aa strict relaxed"), each skipped when it would not end before the
#    deadline: `specproxy replay` of PROMPTS prompts (200, from prompts_fresh.json.gz), alternate
#    mode, concurrency CONC (8), blocks of BLOCK (20), /generate, temperature TEMP, OUTPUT_LEN (128)
#    new tokens, then SCORE (400) scoring requests: two per pair, after the timed blocks.
# 5. The reports: strict and relaxed each with the A/A run as noise floor (`specproxy report
#    RUN AA`), text and JSON; results.jsonl gets one line per comparison (distribution verdict,
#    shift, E2E ratio, accept length, scoring counts); records.tar.gz and sglang-run.tar.gz.
# Resumable: on the same, still-warm machine a second call with KEEP=1 and STEPS naming the runs
# still missing (e.g. KEEP=1 STEPS="relaxed") keeps the earlier run directories in $R, builds
# the pair and starts the servers again, and reports all three (the A/A run stays the floor);
# on a fresh machine give all the steps again. Not run yet: no figures exist.
set -uo pipefail
: "${OUT:?OUT must name a folder for the result files}"
K=${K:-2}; EPS=${EPS:-0.05}; DEADLINE_S=${DEADLINE_S:-540}; RELAXED=${RELAXED:-0.3}
TEMP=${TEMP:-0.7}; PROMPTS_N=${PROMPTS:-200}; CONC=${CONC:-8}; BLOCK=${BLOCK:-20}
OUTPUT_LEN=${OUTPUT_LEN:-128}; SCORE=${SCORE:-400}; STEPS=${STEPS:-"aa strict relaxed"}
HERE=docs/validation/distribution
R=/tmp/dist-records
M=/tmp/tb-models/k${K}-eps${EPS}
B=http://127.0.0.1:30000 S=http://127.0.0.1:30001 X=http://127.0.0.1:30003
t0=$(date +%s); DEADLINE=$(( t0 + DEADLINE_S ))
say() { echo "[dist +$(( $(date +%s) - t0 ))s] $*"; }
DECLARE=(--declare gpu="NVIDIA H200" --declare precision=bf16
         --declare target_revision="random-seed0-k${K}-eps${EPS}"
         --declare draft_revision="first-${K}-layers-of-target")

serve_one() {  # serve_one NAME PORT EXTRA...
  local name=$1 port=$2; shift 2
  bash .gpu/serve.sh "$name" "$port" --cuda-graphs --timeout 330 -- --model-path "$M/target" \
    --dtype bfloat16 --max-running-requests 64 --cuda-graph-max-bs 64 \
    --cuda-graph-backend-prefill disabled --max-total-tokens 131072 --mem-fraction-static 0.7 \
    --random-seed 1 "$@" > "$R/serve-$name.out" 2>&1
}

start_servers() {
  local draft=(--speculative-algorithm STANDALONE --speculative-draft-model-path "$M/draft"
               --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4)
  local pb ps px rc=0
  serve_one base 30000 & pb=$!
  sleep 5; serve_one strict 30001 "${draft[@]}" & ps=$!
  sleep 5; serve_one relaxed 30003 "${draft[@]}" --speculative-accept-threshold-single "$RELAXED" \
    --speculative-accept-threshold-acc "$RELAXED" & px=$!
  wait $pb || rc=1; wait $ps || rc=1; wait $px || rc=1
  cat "$R"/serve-*.out
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv | tee "$R/gpu-memory.txt"
  return $rc
}

one_run() {  # one_run NAME CANDIDATE_URL: a scored, sampled alternate replay
  local name=$1 cand=$2 need=150
  if [ $(( $(date +%s) + need )) -ge $DEADLINE ]; then say "$name skipped: the deadline is near"; return 0; fi
  say "replay $name"
  timeout $(( DEADLINE - $(date +%s) )) python3 -m specproxy replay "$R/prompts.json" --format sharegpt \
    --baseline $B --candidate "$cand" --mode alternate --concurrency "$CONC" --block-size "$BLOCK" \
    --route generate --temperature "$TEMP" --output-len "$OUTPUT_LEN" --score-requests "$SCORE" \
    "${DECLARE[@]}" --run-dir "$R/dist-$name" > "$R/replay-$name.out" 2>&1
  say "replay $name rc=$?"; tail -4 "$R/replay-$name.out"
}

report_one() {  # report_one NAME: the comparison with the A/A run as its noise floor
  local name=$1 runs=("$R/dist-$1")
  [ -d "$R/dist-$name" ] || return 0
  [ "$name" != aa ] && [ -d "$R/dist-aa" ] && runs+=("$R/dist-aa")
  python3 -m specproxy report "${runs[@]}" --format text > "$OUT/report-$name.txt" 2>&1
  python3 -m specproxy report "${runs[@]}" --format json > "$R/report-$name.json" 2>/dev/null
  python3 - "$R/report-$name.json" "$name" >> "$OUT/results.jsonl" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
d, v = r.get("distribution") or {}, r["verdict"]
acc = [a for a in r["acceptance"] if a["side"] == "candidate"][0]
print(json.dumps({"step": sys.argv[2], "distribution": d.get("label"), "text": d.get("text"),
                  "shift": d.get("logprob"), "length": d.get("length"), "margin": d.get("margin"),
                  "lossy": d.get("lossy"), "scoring": d.get("scoring"), "verdict": v["label"],
                  "e2e_ratio": v["interval"], "accept_length": acc["token_weighted_mean"]}))
EOF
  grep -A 6 "^At a glance" "$OUT/report-$name.txt" | head -8
}

probe_scoring() {  # what 0.5.16 answers a teacher-forced request for 0 and for 1 new token
  local n
  for n in 0 1; do
    curl -s -m 30 -X POST $B/generate -H 'Content-Type: application/json' -d "{\"input_ids\": [1, 450, 1996, 354, 701, 432, 204, 975, 278, 366, 1203], \"sampling_params\": {\"max_new_tokens\": $n, \"temperature\": $TEMP}, \"return_logprob\": true, \"logprob_start_len\": 4}" \
      > "$R/probe-scoring-$n.json"
    say "probe max_new_tokens=$n: $(head -c 600 "$R/probe-scoring-$n.json")"
  done
}

main() {
  [ -n "${KEEP:-}" ] || rm -rf "$R"
  mkdir -p "$R"
  say "setup (K=$K EPS=$EPS, relaxed thresholds $RELAXED, T=$TEMP, steps: $STEPS)"
  bash .gpu/setup.sh --variants none || { say "setup failed"; return 1; }
  . .gpu/env.sh
  export PYTHONPATH="$PWD:$PYTHONPATH"
  [ -f .gpu/jit-cache.tar.gz ] && tar xzf .gpu/jit-cache.tar.gz -C "$HOME"
  python3 -c "import gzip, json, sys; e = json.load(gzip.open(sys.argv[1])); json.dump(e[:int(sys.argv[3])], open(sys.argv[2], 'w'))" \
    docs/validation/testbed/prompts_fresh.json.gz "$R/prompts.json" "$PROMPTS_N"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$R/nvidia-smi.txt"
  python3 bench/gpu/testbed/build_pair.py "$M" .gpu/tokenizer --k "$K" --eps "$EPS" | tee "$R/pair.json" || return 1
  start_servers || { say "a server did not come up"; return 1; }
  python3 -m specproxy check --baseline $B --candidate $S --json > "$R/check-strict.json" 2>&1
  python3 -m specproxy check --baseline $B --candidate $X --json > "$R/check-relaxed.json" 2>&1
  grep -o '"lossless_acceptance"[^}]*' "$R"/check-*.json
  probe_scoring
  local step
  for step in $STEPS; do
    case $step in aa) one_run aa $B ;; strict) one_run strict $S ;; relaxed) one_run relaxed $X ;; esac
  done
  for step in aa strict relaxed; do report_one $step; done
}

finish() {
  say "packing"
  tar czf "$OUT/records.tar.gz" -C "$R" . 2>/dev/null
  bash .gpu/collect.sh "$OUT" > /dev/null 2>&1
  bash .gpu/stop_all.sh > /dev/null 2>&1
  say "end"
}

{ main; say "main rc=$?"; finish; } 2>&1 | tee -a "$OUT/run.log"
