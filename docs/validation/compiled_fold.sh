#!/bin/sh
# Does compiling the end-of-stream fold lower the proxy's CPU? An experiment, not a build
# option: a copy of this checkout with the fold's modules compiled by mypyc (which comes with
# mypy, a test dependency; needs a C compiler), timed against this checkout.
#   1. the fold alone: bench/fold_speed.py in the compiled copy, then here;
#   2. in place: bench/beside_nginx.py --against the compiled copy, at 16 streams.
# Usage, from the repository root with the venv made (make venv):
#   sh docs/validation/compiled_fold.sh
set -eu
root=$(pwd)
py="$root/.venv/bin/python"
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
git archive HEAD | tar -x -C "$copy"
(cd "$copy" && git init -q && git add -A && git -c user.name=x -c user.email=x@localhost commit -qm copy)
(cd "$copy" && "$root/.venv/bin/mypyc" specproxy/core/measurement/measure.py specproxy/core/protocol/events.py \
    specproxy/core/protocol/fields.py specproxy/core/protocol/sse.py specproxy/core/measurement/timing.py >/dev/null)
(cd "$copy" && ls specproxy/core/*.so)
for round in 1 2; do
    echo "round $round, compiled:"; (cd "$copy" && "$py" -P bench/fold_speed.py --rounds 7 | tail -1)
    echo "round $round, as it is:"; "$py" -P bench/fold_speed.py --rounds 7 | tail -1
done
"$py" bench/beside_nginx.py --against "$copy" --concurrency 16
