# Second run on the 16-core GPU host (as device.sh): why the C speedups were not built there
# (the optional build's own output), then N = 1, 2, 4, 8 with more streams per worker
# (device.sh's 192 did not saturate the workers) and more stand-in and load processes.
set -eu
inc=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
echo "Python headers: $inc: $(ls "$inc/Python.h" 2>&1)"
pip install -q --no-index --no-deps --target /tmp/spx .devwheels/*.whl
PYTHONPATH=/tmp/spx pip install -v --no-index --no-deps --no-build-isolation --no-compile \
  --target /tmp/spx-new . > "$OUT/install2.log" 2>&1
grep -iE "speedups|error|Python.h" "$OUT/install2.log" | head -8 || true
export PYTHONPATH=/tmp/spx-new:/tmp/spx
python3 -c "from specproxy.core import speedups; print('C speedups:', speedups.SPEEDUPS)"
timeout 400 python3 bench/workers_scale.py --workers 1,2,4,8 --rounds 1 --streams-per-worker 320 \
  --upstreams 10 --json "$OUT/saturated.json" > "$OUT/saturated.txt" 2>&1 || echo "failed"
grep -E "^\| [0-9]|warning" "$OUT/saturated.txt" || tail -5 "$OUT/saturated.txt"
