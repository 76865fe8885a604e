"""specproxy beside nginx: added latency, throughput and CPU per request, in one run.

Not a test: prints figures. All on loopback, every party its own process:

- a calibrated stand-in upstream (``bench/standin_upstream.py``: 5 ms TTFT, 2 ms per
  token, 32 tokens, one token per chunk), and a second one as the mirror's shadow;
- nginx (``proxy_buffering off``, HTTP/1.1 keep-alive upstream, one worker), installed
  from Debian with ``apt-get`` when it is missing;
- ``specproxy serve --kind openai`` in passthrough, and in mirror mode;
- this process, which drives closed-loop load (N concurrent streaming requests).

At each concurrency the four targets (direct, nginx, passthrough, mirror) run in
interleaved blocks whose order rotates, so that drift on a shared machine spreads over
all of them. ``--against TREE`` adds ``passthrough@REV`` and ``mirror@REV``: the same
two proxies run from another checkout of specproxy (``TREE``, at revision ``REV``) in
the same rotation, so that a change is measured against its predecessor on the same
machine at the same time, which a shared machine's drift between two runs does not allow;
then each proxy's TTFT p50 against its other tree's, round by round. ``--floor`` adds
``tcp-relay`` and ``tcp-mirror`` (``bench/tcp_relay.py``): a bare byte relay on uvloop,
without and with a copy of each request to the shadow, which is the least any Python
proxy on that loop can cost (one callback per read, no HTTP, no measurement), and then
each proxy beside its floor (passthrough beside ``tcp-relay``, mirror beside
``tcp-mirror``). Figures: added
TTFT/E2E p50/p99 = target - direct, in ms; req/s achieved;
CPU ms per request of the target's own processes (read from /proc; nginx: master and
workers). Run time is bounded: warm-up + blocks x block_s x the targets per concurrency.

Usage: ``python bench/beside_nginx.py [--block-s 3] [--blocks 4] [--concurrency 1 16 64]
[--against TREE] [--floor] [--no-nginx]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_overhead import (
    PROXY_URL,
    SIM_URL,
    Samples,
    _ms,
    alternate,
    closed_loop,
    cpu_s,
    launch,
)

from specproxy.runtime import run
from specproxy.sweep.launchers import free_port

HERE = Path(__file__).resolve().parent
NAME_WIDTH = 20  # "passthrough@abcdef1+"
NGINX_CONF = """
daemon off;
master_process on;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  upstream up {{ server {upstream}; keepalive 256; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
"""


def nginx_binary() -> str:
    """The nginx executable; installs Debian's ``nginx-light`` (else ``nginx``) when missing."""
    for found in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if found and os.access(found, os.X_OK):
            return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for package in ("nginx-light", "nginx"):
        print(f"nginx missing: apt-get install -y {package}", flush=True)
        done = subprocess.run(
            ["apt-get", "install", "-y", package], env=env, capture_output=True, check=False
        )
        if done.returncode == 0 and os.access("/usr/sbin/nginx", os.X_OK):
            return "/usr/sbin/nginx"
    sys.exit("nginx is missing and apt-get could not install nginx-light or nginx")


def process_tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its direct children (nginx's master and workers)."""
    total = cpu_s(pid)
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
            total += sum(cpu_s(int(child)) for child in children)
    return total


@contextlib.asynccontextmanager
async def nginx(binary: str, upstream: str, tmp: Path) -> AsyncIterator[tuple[str, int]]:
    """nginx in front of ``upstream`` (host:port) on a free port; yields (URL, master pid)."""
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, upstream=upstream, port=port))
    proc = await asyncio.create_subprocess_exec(
        binary, "-c", str(conf), "-e", str(tmp / "error.log")
    )
    try:
        url = f"http://127.0.0.1:{port}"
        async with asyncio.timeout(30):
            while True:
                with contextlib.suppress(OSError):
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    break
                await asyncio.sleep(0.05)  # polling for the port, not a wait for an event
        yield url, proc.pid
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


def serve(
    run_dir: str, *args: str, tree: Path | None = None
) -> contextlib.AbstractAsyncContextManager[tuple[str, int]]:
    """``specproxy serve`` from this checkout, or from the checkout at ``tree`` (``-P``: the
    working directory, which may hold another checkout, is not put first on the path)."""
    argv = (sys.executable, "-P", "-m", "specproxy", "serve", "--kind", "openai", "--port", "0")
    env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
    return launch(PROXY_URL, *argv, "--run-dir", run_dir, *args, env=env)


def tcp_relay(
    upstream: str, shadow: str | None = None
) -> contextlib.AbstractAsyncContextManager[tuple[str, int]]:
    """``bench/tcp_relay.py`` in front of ``upstream`` (a URL), copying every request to
    ``shadow`` when given: the uvloop floor under passthrough, or under mirror."""
    argv = [
        sys.executable,
        str(HERE / "tcp_relay.py"),
        "--upstream",
        upstream.removeprefix("http://"),
    ]
    if shadow is not None:
        argv += ["--shadow", shadow.removeprefix("http://")]
    return launch(PROXY_URL, *argv)


def revision(tree: Path) -> str:
    """The short commit of the checkout at ``tree`` (``+`` when it has uncommitted changes)."""

    def git(*args: str) -> str:
        argv = ["git", "-C", str(tree), *args]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else "unknown"

    dirty = git("status", "--porcelain") not in ("", "unknown")
    return git("rev-parse", "--short", "HEAD") + ("+" if dirty else "")


def standin(args: argparse.Namespace) -> contextlib.AbstractAsyncContextManager[tuple[str, int]]:
    argv = (sys.executable, str(HERE / "standin_upstream.py"), "--tokens", str(args.tokens))
    return launch(SIM_URL, *argv, "--ttft-ms", str(args.ttft_ms), "--token-ms", str(args.token_ms))


async def run_blocks(
    session: aiohttp.ClientSession,
    targets: dict[str, tuple[str, int | None]],
    body: bytes,
    concurrency: int,
    args: argparse.Namespace,
    mirrors: dict[str, str],
) -> dict[str, Samples]:
    """Warm-up, then ``args.blocks`` rounds of one block per target, order rotating
    (``proxy_overhead.alternate``); each mirror's shadows (``mirrors``: target name to
    proxy URL) finish inside its own blocks."""
    return await alternate(
        session,
        {name: url + "/v1/chat/completions" for name, (url, _) in targets.items()},
        body,
        concurrency,
        args,
        idle=mirrors,
        pids={name: pid for name, (_, pid) in targets.items() if pid},
        rotate=True,
        cpu=process_tree_cpu_s,
    )


def report(concurrency: int, res: dict[str, Samples], args: argparse.Namespace) -> None:
    direct = res["direct"]
    nginx_cpu = (cpu_per_request(res["nginx"]) if "nginx" in res else 0.0) or float("nan")
    seconds = args.blocks * args.block_s
    for name, s in res.items():
        row = [f"{concurrency:>5}", f"{name:<{NAME_WIDTH}}", f"{len(s.e2e_us):>7}"]
        row.append(f"{len(s.e2e_us) / seconds:8.1f}")
        if name == "direct":
            row += [f"{'':>8}"] * 4
        else:
            row += [
                _ms(s.pct(which, q) - direct.pct(which, q))
                for which in ("ttft_us", "e2e_us")
                for q in (0.5, 0.99)
            ]
        cpu = f"{1e3 * cpu_per_request(s):8.3f}" if name != "direct" else f"{'':>8}"
        shown = "nginx" in res and name not in ("direct", "nginx")
        versus = cpu_per_request(s) / nginx_cpu if shown else None
        row += [_ms(s.pct("ttft_us", 0.5)), _ms(s.pct("e2e_us", 0.5)), cpu, f"{s.failed:>5}"]
        row.append(f"{versus:8.2f}" if versus is not None else f"{'':>8}")
        print(" ".join(row), flush=True)


FLOORS = {"passthrough": "tcp-relay", "mirror": "tcp-mirror"}


def report_floor(concurrency: int, res: dict[str, Samples]) -> None:
    """Each proxy beside its floor (``--floor``): passthrough beside ``tcp-relay``, mirror
    beside ``tcp-mirror``, in CPU per request (a multiple, and the ms over it), TTFT p50
    and req/s."""
    for name, s in res.items():
        floor_name = FLOORS.get(name.partition("@")[0], "")
        floor = res.get(floor_name)
        if floor is None or not floor.e2e_us or not s.e2e_us:
            continue
        cpu, floor_cpu = cpu_per_request(s), cpu_per_request(floor)
        ttft = s.pct("ttft_us", 0.5) - floor.pct("ttft_us", 0.5)
        print(
            f"{concurrency:>5} {name} beside {floor_name}: cpu"
            f" {cpu / floor_cpu if floor_cpu else float('nan'):.2f} x"
            f" (+{1e3 * (cpu - floor_cpu):.3f} ms); TTFT p50 {_ms(ttft).strip()} ms;"
            f" req/s {100 * len(s.e2e_us) / len(floor.e2e_us):.1f}% of its",
            flush=True,
        )


def report_pairs(concurrency: int, res: dict[str, Samples]) -> None:
    """Each proxy against the same proxy from ``--against``'s tree, round by round: the
    difference of their TTFT p50s in each round (both ran in it, in rotating order), so
    that a change can be told from the machine's drift between rounds."""
    for name, s in res.items():
        base, _, rev = name.partition("@")
        if not rev or base not in res:
            continue
        mine = res[base].block_ttft_p50_us
        diffs = sorted(a - b for a, b in zip(mine, s.block_ttft_p50_us, strict=True))
        if not diffs:
            continue
        median = statistics.median(diffs)
        print(
            f"{concurrency:>5} {base} - {name}: TTFT p50 by round {_ms(median).strip()} ms"
            f" (median of {len(diffs)} rounds; range {_ms(diffs[0]).strip()} to"
            f" {_ms(diffs[-1]).strip()}; {sum(d < 0 for d in diffs)} of {len(diffs)} lower)",
            flush=True,
        )


async def warmed_load(
    stack: contextlib.AsyncExitStack, url: str, args: argparse.Namespace
) -> tuple[aiohttp.ClientSession, str, bytes]:
    """A client session (closed with ``stack``), the chat route of ``url`` and the load's
    body, after a second of closed-loop warm-up at ``args.concurrency`` streams."""
    session = await stack.enter_async_context(
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    )
    target = url + "/v1/chat/completions"
    body = chat_body(args.tokens)
    await closed_loop(session, target, body, args.concurrency, 1.0, Samples())
    return session, target, body


def chat_body(tokens: int) -> bytes:
    """The load's request: a short streamed chat request for ``tokens`` tokens."""
    message = {"role": "user", "content": "Write about the sea."}
    return orjson.dumps({"model": "m", "messages": [message], "max_tokens": tokens, "stream": True})


def cpu_per_request(s: Samples) -> float:
    """CPU seconds of the target's processes per completed request."""
    return s.cpu_s / max(1, len(s.e2e_us))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--block-s", type=float, default=3.0)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--ttft-ms", type=float, default=5.0)
    parser.add_argument("--token-ms", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument(
        "--against", type=Path, metavar="TREE", help="another specproxy checkout to run beside"
    )
    parser.add_argument(
        "--floor", action="store_true", help="also run bench/tcp_relay.py (the uvloop floor)"
    )
    parser.add_argument(
        "--no-nginx", action="store_true", help="leave nginx out (a host without it, offline)"
    )
    args = parser.parse_args()
    binary = None if args.no_nginx else nginx_binary()
    body = chat_body(args.tokens)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="specproxy-nginx-") as tmp:
        async with contextlib.AsyncExitStack() as stack:
            up, _ = await stack.enter_async_context(standin(args))
            shadow, _ = await stack.enter_async_context(standin(args))
            proxies = {"passthrough": ("--mode", "passthrough"), "mirror": ("--candidate", shadow)}
            trees: dict[str, Path | None] = {"": None}
            if args.against is not None:
                trees["@" + revision(args.against)] = args.against.resolve()
            targets: dict[str, tuple[str, int | None]] = {"direct": (up, None)}
            if binary is not None:
                ngx = nginx(binary, up.removeprefix("http://"), Path(tmp))
                targets["nginx"] = await stack.enter_async_context(ngx)
            if args.floor:
                targets["tcp-relay"] = await stack.enter_async_context(tcp_relay(up))
                relay_mirror = tcp_relay(up, shadow)
                targets["tcp-mirror"] = await stack.enter_async_context(relay_mirror)
            for suffix, tree in trees.items():
                for name, mode in proxies.items():
                    run_dir = f"{tmp}/{name}{suffix}"
                    started_proxy = serve(run_dir, "--baseline", up, *mode, tree=tree)
                    targets[name + suffix] = await stack.enter_async_context(started_proxy)
            mirrors = {name: url for name, (url, _) in targets.items() if name.startswith("mirror")}
            session = await stack.enter_async_context(
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
            )
            here = revision(HERE.parent)
            print(
                f"stand-in: {args.ttft_ms:g} ms TTFT, {args.token_ms:g} ms/token,"
                f" {args.tokens} tokens, 1 token per chunk; {args.blocks} blocks x"
                f" {args.block_s:g} s per target; os.cpu_count() = {os.cpu_count()};"
                f" passthrough and mirror at {here}"
            )
            print(
                "added = target - direct (ms); cpu = ms of the target's processes per request;"
                " x_nginx = cpu / nginx's cpu (a machine's speed changes both)"
            )
            print(
                f"conc. {'target':<{NAME_WIDTH}}       n    req/s +ttft_50 +ttft_99  +e2e_50"
                "  +e2e_99  ttft_50   e2e_50   cpu_ms fails  x_nginx"
            )
            for concurrency in args.concurrency:
                res = await run_blocks(session, targets, body, concurrency, args, mirrors)
                report(concurrency, res, args)
                report_floor(concurrency, res)
                report_pairs(concurrency, res)
    print(f"total run time {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    run(main())
