#!/usr/bin/env bash
# nextn_check.sh - does the tracking checkpoint give SGLang 0.5.16's NEXTN a partial accept length
# that EPS tunes? On the GPU host, from the repository root, with the kit carried as .gpu:
#
#   OUT=... [EPS_LIST="0.01 0.02"] [PROBE=1] [BASE=0] [LEVELS="1 16"] [HIDDEN=4096] [LAYERS=30]
#     [GRAPH_BS=16] [DEADLINE=560] bash docs/validation/nextn/nextn_check.sh
#
# 1. setup.sh --variants none; with PROBE=1, probe_nextn.py at full size on the GPU (random
#    contexts and the testbed's ShareGPT prompts) -> $OUT/probe_random.json, $OUT/probe_prompts.json.
# 2. For each EPS: build_nextn_tracking.py -> /tmp/nextn-tracking/eps-EPS (reused if built), then
#    one server with --speculative-algorithm NEXTN --speculative-num-steps 3
#    --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 (no draft path), CUDA graphs on;
#    measure_accept.py at each concurrency in LEVELS (16 ShareGPT prompts at 1 stream, 4 per
#    stream above, 64 greedy tokens, ignore_eos); the server is stopped before the next EPS.
# With BASE=1 the first checkpoint is first served without speculation (EPS changes no compute),
# at the same levels, as the baseline.
# A step that would start after DEADLINE seconds is skipped. Writes $OUT/run.log (tee it),
# $OUT/measure.jsonl, $OUT/builds.jsonl and $OUT/sglang-run.tar.gz (server logs, commands).
set -uo pipefail
: "${OUT:?set OUT}"
EPS_LIST=${EPS_LIST:-"0.01 0.02"} PROBE=${PROBE:-1} BASE=${BASE:-0} LEVELS=${LEVELS:-"1 16"}
HIDDEN=${HIDDEN:-4096} LAYERS=${LAYERS:-30} GRAPH_BS=${GRAPH_BS:-16} DEADLINE=${DEADLINE:-560}
kit=bench/gpu/nextn   # its Python scripts
prompts=docs/validation/testbed/prompts_sharegpt128.json
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }; say() { echo "[nextn +$(el)s] $*"; }
left() { [ $(( DEADLINE - $(el) )) -gt "$1" ]; }

bash .gpu/setup.sh --variants none > "$OUT/setup.log" 2>&1 || { tail -20 "$OUT/setup.log"; exit 1; }
. .gpu/env.sh
say "setup done"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader

if [ "$PROBE" = 1 ]; then
  python3 "$kit/probe_nextn.py" --device cuda --hidden "$HIDDEN" --layers "$LAYERS" \
    --eps 0,0.005,0.01,0.02,0.05 --json "$OUT/probe_random.json" 2>&1 | grep -v -i warn
  python3 "$kit/probe_nextn.py" --device cuda --hidden "$HIDDEN" --layers "$LAYERS" \
    --eps 0,0.005,0.01,0.02 --prompts "$prompts" --batch 16 --json "$OUT/probe_prompts.json" 2>&1 \
    | grep -v -i warn
  say "probe done"
fi

COMMON=(--dtype bfloat16 --max-running-requests 64 --cuda-graph-max-bs "$GRAPH_BS"
        --mem-fraction-static 0.6 --random-seed 1)
SPEC=(--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1
      --speculative-num-draft-tokens 4)

measure() {  # measure NAME PORT
  for c in $LEVELS; do
    n=$(( c == 1 ? 16 : 4 * c ))
    python3 "$kit/measure_accept.py" "http://127.0.0.1:$2" "$prompts" --n "$n" --concurrency "$c" \
      --label "$1" --out "$OUT/measure.jsonl"
  done
  grep -h -E "accept len" "$SGLKIT_RUN/$1.log" | tail -2
}

for eps in $EPS_LIST; do
  left 200 || { say "skip eps $eps (deadline)"; continue; }
  M=/tmp/nextn-tracking/eps-$eps
  # one 12 GB checkpoint at a time on the host's 64 GB disk
  find /tmp/nextn-tracking -mindepth 1 -maxdepth 1 ! -name "eps-$eps" -exec rm -rf {} + 2>/dev/null
  python3 "$kit/build_nextn_tracking.py" "$M" .gpu/tokenizer --eps "$eps" --hidden "$HIDDEN" \
    --layers "$LAYERS" 2>&1 | grep -v -i warn | tee -a "$OUT/builds.jsonl"
  say "built eps $eps"
  if [ "$BASE" = 1 ]; then  # the baseline once, on the first checkpoint (EPS changes no compute)
    BASE=done
    bash .gpu/serve.sh base 30000 --cuda-graphs --timeout 300 -- --model-path "$M" "${COMMON[@]}" \
      && measure base 30000
    bash .gpu/stop_all.sh base > /dev/null 2>&1
    say "base done"
    left 150 || break
  fi
  if bash .gpu/serve.sh "nextn-$eps" 30001 --cuda-graphs --timeout 300 -- --model-path "$M" \
      "${COMMON[@]}" "${SPEC[@]}"; then
    say "nextn-$eps up after $(cat "$SGLKIT_RUN/nextn-$eps.up" 2>/dev/null) s"
    measure "nextn-$eps" 30001
  else
    grep -n -m5 -E "Error|error:|Traceback" "$SGLKIT_RUN/nextn-$eps.log" | tail -5
  fi
  bash .gpu/stop_all.sh "nextn-$eps" > /dev/null 2>&1
  say "eps $eps done"
done

bash .gpu/collect.sh "$OUT" > /dev/null
bash .gpu/stop_all.sh > /dev/null 2>&1
say "end"
