#!/usr/bin/env sh
# Real traffic against the launched pair (run by pair_checks.sh after the preflight
# checks, with SPECPROXY_BASELINE_URL, SPECPROXY_CANDIDATE_URL, SPECPROXY_RUN_DIR set):
#   1. `specproxy replay` in alternate mode (ABBA blocks) on MT-Bench prompts, /generate;
#   2. `specproxy replay` of a Mooncake sample (synthesised prompts with shared prefixes);
#   3. `specproxy serve` in mirror mode, driven by the official openai client and by
#      `specproxy replay --via`, stopped with SIGTERM;
#   4. `specproxy report` on every run directory.
# Exits 1 if any step fails.
B=$SPECPROXY_BASELINE_URL
C=$SPECPROXY_CANDIDATE_URL
R=$SPECPROXY_RUN_DIR
bad=0
step() { echo "== $*"; }
step "replay alternate (MT-Bench, /generate, greedy)"
python3 -m specproxy replay traces/mtbench_question.jsonl --baseline "$B" --candidate "$C" \
  --mode alternate --block-size 10 --limit 40 --rate 8 --route generate --output-len 64 \
  --temperature 0 --run-dir "$R/replay-alternate" > "$R/replay-alternate.out" 2>&1 || bad=1
tail -n 40 "$R/replay-alternate.out"
step "replay mirror (Mooncake sample, synthesised prompts, chat)"
python3 -m specproxy replay traces/mooncake_conversation_300.jsonl --baseline "$B" --candidate "$C" \
  --mode mirror --limit 30 --rate 6 --route chat --max-context 3000 --over-context clamp \
  --output-len 64 --run-dir "$R/replay-mooncake" > "$R/replay-mooncake.out" 2>&1 || bad=1
tail -n 12 "$R/replay-mooncake.out"
step "proxy in mirror mode"
python3 -m specproxy serve --baseline "$B" --candidate "$C" --mode mirror --port 8011 \
  --run-dir "$R/proxy-mirror" > "$R/proxy-mirror.out" 2>&1 &
proxy=$!
ok=0
for _ in $(seq 1 50); do
  if python3 -c 'import urllib.request,sys; urllib.request.urlopen("http://127.0.0.1:8011/health", timeout=2)' 2>/dev/null; then ok=1; break; fi
  sleep 0.2
done
[ "$ok" = 1 ] || { echo "proxy did not come up"; bad=1; }
python3 bench/gpu/openai_clients.py http://127.0.0.1:8011 > "$R/openai-clients.out" 2>&1 || bad=1
cat "$R/openai-clients.out"
python3 -m specproxy replay traces/sharegpt_v3_first200.json --via http://127.0.0.1:8011 \
  --mode mirror --limit 30 --rate 5 --route chat --output-len 48 --temperature 0 \
  --run-dir "$R/replay-via-proxy" > "$R/replay-via-proxy.out" 2>&1 || bad=1
tail -n 5 "$R/replay-via-proxy.out"
python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8011/_specproxy/status", timeout=5).read().decode())' > "$R/proxy-status.json" 2>&1 || true
kill -TERM "$proxy"; wait "$proxy"; echo "proxy exit $? after SIGTERM"
step "reports"
for d in replay-alternate replay-mooncake proxy-mirror; do
  python3 -m specproxy report "$R/$d" --format text > "$R/$d.report.txt" 2>&1 || bad=1
done
head -n 40 "$R/replay-alternate.report.txt"
exit $bad
