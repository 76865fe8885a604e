#!/usr/bin/env bash
# sweep_step.sh - run_testbed.sh's EXTRA_STEP: `specproxy sweep` of one candidate against the
# baseline on the ShareGPT prompts, greedy /generate, 64 tokens with ignore_eos, concurrency 1 to 64.
#
#   EXTRA_STEP='bash docs/validation/testbed/sweep_step.sh' bash docs/validation/testbed/run_testbed.sh
#
# Needs B, S (or N), R and DEADLINE from run_testbed.sh. The sweep gets SIGINT (it keeps the
# finished levels and marks the sweep aborted) RESERVE_S seconds before DEADLINE, leaving that
# time to the bench_serving ground truth. With --pairs 64 a level needs at most 128 requests (one
# partial block of 64 counted + 64 cool-down at 64 streams), so the 128-prompt file is enough.
# SWEEP_CANDIDATE=ngram sweeps the NGRAM server ($N) into $R/sweep-ngram; SWEEP_FRESH=1 adds
# --fresh-prompts (each batch continues the trace: no prompt is sent twice) and reads
# $R/prompts/fresh-sweep.json (written by run_testbed.sh with FRESH=1) unless PROMPTS is set.
set -uo pipefail
: "${B:?}" "${R:?}" "${DEADLINE:?}"
RESERVE_S=${RESERVE_S:-110}
NAME=${SWEEP_CANDIDATE:-standalone}
case $NAME in
  standalone) URL=${S:?} ;;
  ngram) URL=${N:?} ;;
  *) echo "sweep: SWEEP_CANDIDATE must be standalone or ngram, got $NAME" >&2; exit 2 ;;
esac
FRESH_OPT=()
DEFAULT_PROMPTS=docs/validation/testbed/prompts_sharegpt128.json
if [ -n "${SWEEP_FRESH:-}" ]; then
  FRESH_OPT=(--fresh-prompts); DEFAULT_PROMPTS=$R/prompts/fresh-sweep.json
fi
PROMPTS=${PROMPTS:-$DEFAULT_PROMPTS}
LEVELS=${SWEEP_LEVELS:-1,2,4,8,16,32,64}
left=$(( DEADLINE - RESERVE_S - $(date +%s) ))
if [ "$left" -lt 20 ]; then echo "sweep: skipped, only $left s left"; exit 0; fi
echo "sweep: $NAME on $PROMPTS ${FRESH_OPT[*]}, at most $left s"
timeout -s INT -k 20 "$left" python3 -m specproxy sweep "$PROMPTS" --format sharegpt \
  --baseline "$B" --candidate "$URL" --concurrency "$LEVELS" \
  --pairs "${SWEEP_PAIRS:-64}" --block-size "${SWEEP_BLOCK:-16}" "${FRESH_OPT[@]}" \
  --route generate --output-len 64 --ignore-eos --temperature 0 --drain-s 5 \
  --declare gpu="NVIDIA H200" --declare precision=bf16 \
  --run-dir "$R/sweep-$NAME"
rc=$?
echo "sweep: rc=$rc"
exit 0
