# Second run on the GPU host: bench/record_live.py again, with the C speedups built in the
# checkout (setup.py build_ext --inplace), since record_speed.py imports the checkout and
# the first run's tight loop therefore ran the Python paths; passthrough, then mirror.
set -u
pip install -q --no-index --no-deps --target /tmp/spx .devwheels/*.whl
PYTHONPATH=/tmp/spx python3 setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || echo "build rc=$?"
export PYTHONPATH="$PWD:/tmp/spx"  # the checkout, with its C build, for the probed proxy too
python3 -c "from specproxy.core import speedups; print('C speedups:', speedups.SPEEDUPS)"
for mode in "" --mirror; do
  timeout 150 python3 bench/record_live.py $mode > "$OUT/record_live$mode.txt" 2>&1 || echo "record_live $mode rc=$?"
  cat "$OUT/record_live$mode.txt"
done
