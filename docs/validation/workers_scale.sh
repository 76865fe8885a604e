#!/usr/bin/env sh
# `serve --workers N` scaling on a many-core host (issue 12, "Workers": rate(N) >= 0.8 N
# up to 8): runs bench/workers_scale.py for N = 1, 2, 4, 8 and keeps the command, the host,
# the printed table and the raw JSON in OUT (default:
# docs/validation/results-<UTC date>-workers). About two minutes with the defaults.
# Usage: sh docs/validation/workers_scale.sh [OUT]   (WORKERS=1,2 for a shorter run; ROUNDS=R
# repeats the set, medians reported; COMMIT=rev names the commit where the copy has no history)
set -eu
OUT=${1:-docs/validation/results-$(date -u +%Y-%m-%d)-workers}
WORKERS=${WORKERS:-1,2,4,8}
ROUNDS=${ROUNDS:-1}
mkdir -p "$OUT"
{
  echo "command: python3 bench/workers_scale.py --workers $WORKERS --rounds $ROUNDS --json $OUT/workers_scale.json"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpus: $(nproc); $(lscpu 2>/dev/null | grep -m1 'Model name' || echo 'model unknown')"
  echo "commit: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
} > "$OUT/workers_scale.txt"
python3 bench/workers_scale.py --workers "$WORKERS" --rounds "$ROUNDS" --json "$OUT/workers_scale.json" 2>&1 \
  | tee -a "$OUT/workers_scale.txt"
