#!/usr/bin/env sh
# Runs as the command after `--` of `specproxy launch deploy/sglang/tiny-standalone.toml`,
# once both servers are healthy. Each preflight is run with the exit status it must
# give; the outputs go into the launch's run directory. Exits 1 if any status differs.
B=$SPECPROXY_BASELINE_URL
C=$SPECPROXY_CANDIDATE_URL
R=$SPECPROXY_RUN_DIR
bad=0
expect() {  # expect NAME STATUS -- ARGS...: run `specproxy check ARGS`, compare the status
  name=$1 want=$2; shift 3
  python3 -m specproxy check "$@" > "$R/check-$name.out" 2> "$R/check-$name.err"
  got=$?
  echo "check $name: exit $got (expected $want)" | tee -a "$R/checks.txt"
  [ "$got" = "$want" ] || bad=1
}
expect matched 0 -- --baseline "$B" --candidate "$C" --expect-algorithm STANDALONE
expect matched-json 0 -- --baseline "$B" --candidate "$C" --json
expect nextn-label 1 -- --baseline "$B" --candidate "$C" --expect-algorithm NEXTN
expect candidate-off 1 -- --baseline "$B" --candidate "$B"
expect baseline-on 1 -- --baseline "$C" --candidate "$C"
expect unreachable 3 -- --baseline "$B" --candidate http://127.0.0.1:30999
python3 bench/gpu/probe_reads.py "$B" "$C" "$R/reads.json" || bad=1
cat "$R/check-matched.out"
sh docs/validation/real_traffic.sh || bad=1
exit $bad
