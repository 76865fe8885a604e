# The floor beside specproxy on the 16-core GPU host (no contention between the load
# generator, the stand-ins and the proxies): bench/beside_nginx.py --floor, with nginx
# when the host has it; then bench/record_live.py. Run from the checkout's root, with
# the development wheels (.devwheels/) in the tree; writes under $OUT.
set -u
if [ ! -d /tmp/spx-new/specproxy ]; then
  pip install -q --no-index --no-deps --target /tmp/spx .devwheels/*.whl
  PYTHONPATH=/tmp/spx pip install -q --no-index --no-deps --no-build-isolation --no-compile \
    --target /tmp/spx-new . > "$OUT/install.log" 2>&1
fi
export PYTHONPATH=/tmp/spx-new:/tmp/spx
python3 -P -c "from specproxy.core import speedups; print('C speedups (-P):', speedups.SPEEDUPS)"
nproc; python3 --version
NGINX=--no-nginx
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then NGINX=; fi
echo "nginx: ${NGINX:-present}"
timeout 420 python3 -P bench/beside_nginx.py --floor $NGINX --blocks 4 \
  --concurrency 1 16 64 256 > "$OUT/beside_floor.txt" 2>&1 || echo "beside_nginx rc=$?"
cat "$OUT/beside_floor.txt"
timeout 120 python3 -P bench/record_live.py > "$OUT/record_live.txt" 2>&1 || echo "record_live rc=$?"
cat "$OUT/record_live.txt"
