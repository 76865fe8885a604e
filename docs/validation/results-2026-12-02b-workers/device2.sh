set -eu
if [ ! -d /tmp/spx-old/specproxy ]; then
  pip install -q --no-index --no-deps --target /tmp/spx .devwheels/*.whl
  PYTHONPATH=/tmp/spx pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/spx-new . >/dev/null
  PYTHONPATH=/tmp/spx pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/spx-old .old-tree >/dev/null
fi
echo "cpus $(nproc); $(python3 --version)"
for round in 2 3 4; do
  for tree in old new; do
    PYTHONPATH=/tmp/spx-$tree:/tmp/spx timeout 170 python3 bench/workers_scale.py --workers 1,4 --rounds 1 >> $OUT/$tree.txt 2>&1 || echo "$tree $round failed"
    echo "== $tree round $round"; grep -E "^\| [0-9]" $OUT/$tree.txt | tail -2
  done
done
