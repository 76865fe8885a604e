# Written, not run yet: no device could be started when it was written (2026-12-05).
# The one server beside the floor on the 16-core GPU host (no contention between the load
# generator, the stand-ins and the proxies): bench/beside_nginx.py --floor, as in
# docs/validation/results-2026-12-02f-floor-host/. Run from the checkout's root with the
# wheels the host lacks in .devwheels/ (pip download of hdrhistogram, structlog, pbr,
# httptools, orjson for its Python); writes under $OUT.
set -u
python3 --version; nproc
pip list 2>/dev/null | grep -i -E "^(aiohttp|uvloop|click|prometheus.client|multidict|yarl|httptools|orjson|structlog|hdrhistogram) "
for mod in hdrh:hdrhistogram structlog:structlog pbr:pbr httptools:httptools orjson:orjson; do
  python3 -c "import ${mod%%:*}" 2>/dev/null ||
    pip install -q --no-index --no-deps --target /tmp/spx --find-links .devwheels "${mod##*:}"
done
PYTHONPATH=/tmp/spx pip install -q --no-index --no-deps --no-build-isolation --no-compile \
  --target /tmp/spx-new . > "$OUT/install.log" 2>&1 || tail -5 "$OUT/install.log"
export PYTHONPATH=/tmp/spx-new:/tmp/spx
python3 -P -c "from specproxy.core import speedups; print('C speedups (-P):', speedups.SPEEDUPS)"
NGINX=--no-nginx
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then NGINX=; fi
echo "nginx: ${NGINX:-present}"
timeout 450 python3 -P bench/beside_nginx.py --floor $NGINX --blocks 4 \
  --concurrency 1 16 64 256 > "$OUT/beside_floor.txt" 2>&1 || echo "beside_nginx rc=$?"
cat "$OUT/beside_floor.txt"
