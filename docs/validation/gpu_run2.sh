#!/usr/bin/env bash
# Second GPU run: measured comparisons with warm-up, two candidate kinds, on the kit's
# tiny attention-off model: a baseline (30000), STANDALONE with a copy draft (30001) and
# NGRAM (30002), started by the kit's serve_pair.sh (--max-running-requests 48 on all).
#   OUT=/some/folder bash docs/validation/gpu_run2.sh   (on the GPU host, kit in .gpu/)
set -uo pipefail
: "${OUT:?OUT must name a folder for the result files}"
R=/tmp/spx-run2
t0=$(date +%s)
say() { echo "[run2 +$(( $(date +%s) - t0 ))s] $*"; }
{
  rm -rf "$R" && mkdir -p "$R"
  bash .gpu/setup.sh --variants attn_off || { echo "setup failed"; exit 1; }
  . .gpu/env.sh
  export PYTHONPATH="$PWD:$PYTHONPATH"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  say "servers"
  bash .gpu/serve_pair.sh --spec standalone-copy --spec ngram || exit 1
  B=http://127.0.0.1:30000; S=http://127.0.0.1:30001; N=http://127.0.0.1:30002
  for c in "$S" "$N"; do
    python3 -m specproxy check --baseline "$B" --candidate "$c" > "$R/check-${c##*:}.out" 2>&1
    echo "check $c: exit $?"
  done
  cat "$R/check-30002.out"
  for c in "$S" "$N"; do
    name=standalone; [ "$c" = "$N" ] && name=ngram
    say "alternate replay: $name, MT-Bench, /generate, 10 warm-up + 80 measured"
    python3 -m specproxy replay traces/mtbench_question.jsonl --baseline "$B" --candidate "$c" \
      --mode alternate --block-size 20 --warmup 10 --limit 90 --rate 8 --route generate \
      --output-len 128 --temperature 0 --run-dir "$R/$name-mtbench" > "$R/$name-mtbench.out" 2>&1
    echo "replay rc=$?"; sed -n '1,12p' "$R/$name-mtbench.out"; tail -n 3 "$R/$name-mtbench.out"
    say "alternate replay: $name, ShareGPT, chat stream (acceptance estimated from chunks)"
    python3 -m specproxy replay traces/sharegpt_v3_first200.json --baseline "$B" --candidate "$c" \
      --mode alternate --block-size 20 --warmup 10 --limit 70 --concurrency 8 --route chat \
      --output-len 96 --temperature 0 --run-dir "$R/$name-sharegpt" > "$R/$name-sharegpt.out" 2>&1
    echo "replay rc=$?"; sed -n '1,12p' "$R/$name-sharegpt.out"
  done
  say "proxy: passthrough vs mirror latency of the primary on real servers"
  for mode in passthrough mirror passthrough mirror; do
    port=$((8100 + RANDOM % 800))
    python3 -m specproxy serve --baseline "$B" --candidate "$N" --mode "$mode" --port "$port" \
      --run-dir "$R/proxy-$mode-$port" > "$R/proxy-$mode-$port.out" 2>&1 &
    pid=$!
    for _ in $(seq 1 50); do
      python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null && break
      sleep 0.2
    done
    python3 -m specproxy replay traces/mtbench_question.jsonl --via "http://127.0.0.1:$port" \
      --mode "$mode" --limit 40 --warmup 4 --concurrency 4 --route chat --output-len 64 \
      --temperature 0 --run-dir "$R/client-$mode-$port" > "$R/client-$mode-$port.out" 2>&1
    kill -TERM "$pid"; wait "$pid"
    python3 - "$R/client-$mode-$port/requests.jsonl" "$mode" <<'PY'
import json, statistics, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
ok = [r for r in rs if not r["warmup"] and r["error_kind"] is None]
e2e = sorted(r["e2e_us"] for r in ok); ttft = sorted(r["ttft_us"] for r in ok)
print(f"{sys.argv[2]:12s} n={len(ok)} client TTFT p50 {statistics.median(ttft)/1000:.2f} ms, E2E p50 {statistics.median(e2e)/1000:.2f} ms")
PY
  done
  say "reports"
  for d in "$R"/standalone-* "$R"/ngram-*; do
    [ -d "$d" ] && python3 -m specproxy report "$d" --format text > "$d.report.txt" 2>&1
  done
  head -n 25 "$R/ngram-mtbench.report.txt"
  bash .gpu/collect.sh "$R" >/dev/null 2>&1
  bash .gpu/stop_all.sh
  tar czf "$OUT/run2.tar.gz" -C "$R" --exclude='*/snapshots' .
  say "done"
} 2>&1 | tee "$OUT/run2.log"
