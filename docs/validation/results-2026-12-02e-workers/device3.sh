# Third run on the 16-core GPU host (as device.sh): the C speedups as `serve` loads them
# (-P: the checkout in the working directory is not on the path), then saturated N = 1
# and N = 8 with them and with SPECPROXY_PURE_PYTHON=1, alternating.
set -eu
if [ ! -d /tmp/spx-new/specproxy ]; then
  pip install -q --no-index --no-deps --target /tmp/spx .devwheels/*.whl
  PYTHONPATH=/tmp/spx pip install -q --no-index --no-deps --no-build-isolation --no-compile \
    --target /tmp/spx-new . > "$OUT/install3.log" 2>&1
fi
export PYTHONPATH=/tmp/spx-new:/tmp/spx
python3 -P -c "from specproxy.core import speedups; print('C speedups (-P):', speedups.SPEEDUPS)"
SPECPROXY_PURE_PYTHON=1 python3 -P -c "from specproxy.core import speedups; print('pure:', speedups.SPEEDUPS)"
run() {  # name, workers, then env assignments
  name=$1; workers=$2; shift 2
  env "$@" timeout 120 python3 bench/workers_scale.py --workers "$workers" --rounds 1 \
    --streams-per-worker 320 --upstreams 12 --json "$OUT/$name.json" > "$OUT/$name.txt" 2>&1 \
    || echo "$name failed"
  echo "== $name"; grep -E "^\| [0-9]|warning" "$OUT/$name.txt" || tail -5 "$OUT/$name.txt"
}
run c1-a 1 SPECPROXY_PURE_PYTHON=
run py1-a 1 SPECPROXY_PURE_PYTHON=1
run c1-b 1 SPECPROXY_PURE_PYTHON=
run py1-b 1 SPECPROXY_PURE_PYTHON=1
run c8 8 SPECPROXY_PURE_PYTHON=
run py8 8 SPECPROXY_PURE_PYTHON=1
