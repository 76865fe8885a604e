#!/usr/bin/env bash
# sweep_step.sh - the second run's EXTRA_STEP: `specproxy sweep` STANDALONE vs the baseline on the
# ShareGPT prompts, greedy /generate, 64 tokens with ignore_eos, concurrency 1 to 64.
#
#   EXTRA_STEP='bash docs/validation/testbed/sweep_step.sh' bash docs/validation/testbed/run_testbed.sh
#
# Needs B, S, R and DEADLINE from run_testbed.sh. The sweep gets SIGINT (it keeps the finished
# levels and marks the sweep aborted) RESERVE_S seconds before DEADLINE, leaving that time to the
# bench_serving ground truth. With --pairs 64 a level needs at most 128 requests (one partial
# block of 64 counted + 64 cool-down at 64 streams), so the 128-prompt file is enough.
set -uo pipefail
: "${B:?}" "${S:?}" "${R:?}" "${DEADLINE:?}"
RESERVE_S=${RESERVE_S:-110}
PROMPTS=${PROMPTS:-docs/validation/testbed/prompts_sharegpt128.json}
LEVELS=${SWEEP_LEVELS:-1,2,4,8,16,32,64}
left=$(( DEADLINE - RESERVE_S - $(date +%s) ))
if [ "$left" -lt 20 ]; then echo "sweep: skipped, only $left s left"; exit 0; fi
echo "sweep: at most $left s"
timeout -s INT -k 20 "$left" python3 -m specproxy sweep "$PROMPTS" --format sharegpt \
  --baseline "$B" --candidate "$S" --concurrency "$LEVELS" \
  --pairs "${SWEEP_PAIRS:-64}" --block-size "${SWEEP_BLOCK:-16}" \
  --route generate --output-len 64 --ignore-eos --temperature 0 --drain-s 5 \
  --declare gpu="NVIDIA H200" --declare precision=bf16 \
  --run-dir "$R/sweep-standalone"
rc=$?
echo "sweep: rc=$rc"
exit 0
