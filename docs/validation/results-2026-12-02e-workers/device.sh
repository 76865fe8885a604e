# Run on the 16-core GPU host from the repository root, with .devwheels/ beside it (cp312
# wheels of click, hdrhistogram, httptools, orjson, prometheus_client, structlog).
# `serve --workers N` with the C speedups built on the host, then the same checkout with
# SPECPROXY_PURE_PYTHON=1 (the Python paths) and with them again, at N = 1 and 8.
set -eu
pip install -q --no-index --no-deps --target /tmp/spx .devwheels/*.whl
PYTHONPATH=/tmp/spx pip install --no-index --no-deps --no-build-isolation --no-compile \
  --target /tmp/spx-new . > "$OUT/install.log" 2>&1
export PYTHONPATH=/tmp/spx-new:/tmp/spx
echo "cpus $(nproc); $(python3 --version); $(gcc --version 2>/dev/null | head -1 || echo 'no gcc')"
python3 -c "from specproxy.core import speedups; print('C speedups:', speedups.SPEEDUPS)"
run() {  # name, workers, then env assignments
  name=$1; workers=$2; shift 2
  env "$@" timeout 200 python3 bench/workers_scale.py --workers "$workers" --rounds 1 \
    --json "$OUT/$name.json" > "$OUT/$name.txt" 2>&1 || echo "$name failed"
  echo "== $name"; grep -E "^\| [0-9]" "$OUT/$name.txt" || tail -5 "$OUT/$name.txt"
}
run c-1 1,2,4,8 SPECPROXY_PURE_PYTHON=
run py-2 1,8 SPECPROXY_PURE_PYTHON=1
run c-3 1,8 SPECPROXY_PURE_PYTHON=
run py-4 1,8 SPECPROXY_PURE_PYTHON=1
