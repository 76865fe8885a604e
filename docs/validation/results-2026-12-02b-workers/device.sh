# Run on the 16-core GPU host from the repository root, with .devwheels/ (cp312 wheels of click, hdrhistogram, httptools,
# orjson, prometheus_client, structlog) and .old-tree/ (git archive 70259f6 specproxy pyproject.toml README.md) beside it.
set -eu
pip install -q --no-index --no-deps --target /tmp/spx .devwheels/*.whl
PYTHONPATH=/tmp/spx pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/spx-new . >/dev/null
PYTHONPATH=/tmp/spx pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/spx-old .old-tree >/dev/null
echo "cpus $(nproc); $(python3 --version)"
for round in 1 2 3; do
  for tree in old new; do
    PYTHONPATH=/tmp/spx-$tree:/tmp/spx timeout 170 python3 bench/workers_scale.py --workers 1,4 --rounds 1 --json $OUT/$tree-$round.json > $OUT/$tree-$round.txt 2>&1 || echo "$tree $round failed"
    echo "== $tree round $round"; grep -E "^ *[0-9]+ " $OUT/$tree-$round.txt | tail -3
  done
done
