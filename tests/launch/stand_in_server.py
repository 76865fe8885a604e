"""A stand-in for ``python -m sglang.launch_server`` that runs on any machine.

Takes SGLang's flags, applies the two startup rules the launcher tests need (partial
manual tuning of the speculative triple fails an assertion; an unknown algorithm is
a ValueError), prints a ``server_args=`` line with the API key in it the way SGLang
does, and then answers ``/health``, ``/server_info``, ``/model_info`` and
``/generate`` from the real run-B captures, changed to what its flags say.

Knobs (environment): ``STAND_IN_HEALTH_503`` answers 503 to that many health probes
first (default 1); ``STAND_IN_IGNORE_TERM=1`` ignores SIGTERM, so only SIGKILL ends it.
``POST /_stand_in/exit`` makes the process exit with status 3 (a crash while serving).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import Any

from aiohttp import web

from tests.launch.captures import RUN_B, generate_body, model_info, server_info

SPEC_INT = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="stand-in")
    for flag in (
        "--model-path",
        "--revision",
        "--host",
        "--api-key",
        "--speculative-algorithm",
        "--speculative-draft-model-path",
    ):
        parser.add_argument(flag, default=None)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mem-fraction-static", type=float, default=None)
    parser.add_argument("--max-running-requests", type=int, default=None)
    parser.add_argument("--random-seed", type=int, default=None)
    for name in SPEC_INT:
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=None)
    return parser.parse_known_args(argv)


def _refuse(args: argparse.Namespace) -> None:
    """Exit 1 with SGLang-style error text for the configurations SGLang refuses."""
    algorithm = (args.speculative_algorithm or "").upper()
    if algorithm and algorithm not in {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"}:
        print(f"ValueError: Unknown speculative algorithm name: {algorithm}", flush=True)
        sys.exit(1)
    partial = (
        args.speculative_eagle_topk is not None or args.speculative_num_draft_tokens is not None
    )
    if algorithm and args.speculative_num_steps is None and partial:
        print("Traceback (most recent call last):", flush=True)
        print('  File "server_args.py", line 1, in _handle_speculative_decoding', flush=True)
        print("    assert self.speculative_num_steps is not None", flush=True)
        print("AssertionError", flush=True)
        sys.exit(1)


def _info(args: argparse.Namespace) -> dict[str, Any]:
    speculative = bool(args.speculative_algorithm)
    info = server_info("sa_copy_b" if speculative else "base_b", RUN_B)
    changes: dict[str, Any] = {
        "model_path": args.model_path,
        "tokenizer_path": args.model_path,
        "served_model_name": args.model_path,
        "revision": args.revision,
        "host": args.host,
        "port": args.port,
        "api_key": args.api_key,
        "mem_fraction_static": args.mem_fraction_static,
        "max_running_requests": args.max_running_requests or (48 if speculative else None),
        "random_seed": args.random_seed if args.random_seed is not None else 12345,
    }
    if speculative:
        changes["speculative_algorithm"] = args.speculative_algorithm.upper()
        changes["speculative_draft_model_path"] = args.speculative_draft_model_path
        changes.update({name: getattr(args, name) for name in SPEC_INT})
    info.update(changes)
    effective = changes["max_running_requests"] or 4096
    for state in info["internal_states"]:
        state.update(changes)
        state["effective_max_running_requests_per_dp"] = effective
    return info


def _app(args: argparse.Namespace) -> web.Application:
    info = _info(args)
    unhealthy = [int(os.environ.get("STAND_IN_HEALTH_503", "1"))]

    async def health(_request: web.Request) -> web.StreamResponse:
        if unhealthy[0] > 0:
            unhealthy[0] -= 1
            return web.Response(status=503)
        return web.Response(status=200)

    def authorised(request: web.Request) -> bool:
        return (
            args.api_key is None or request.headers.get("Authorization") == f"Bearer {args.api_key}"
        )

    def serve(body: Any) -> Any:
        async def handler(request: web.Request) -> web.StreamResponse:
            if not authorised(request):
                return web.json_response({"error": "Unauthorized"}, status=401)
            return web.json_response(body)

        return handler

    async def crash(_request: web.Request) -> web.StreamResponse:
        asyncio.get_running_loop().call_soon(os._exit, 3)  # die right after answering
        return web.Response(text="exiting")

    app = web.Application()
    app.router.add_post("/_stand_in/exit", crash)
    app.router.add_get("/health", health)
    app.router.add_get("/server_info", serve(info))
    app.router.add_get(
        "/model_info", serve({**model_info("base_b", RUN_B), "model_path": args.model_path})
    )
    app.router.add_post("/generate", serve(generate_body("base_b", RUN_B)))
    return app


def main() -> None:
    args, rest = _parse(sys.argv[1:])
    print(
        f"server_args=ServerArgs(model_path='{args.model_path}', api_key='{args.api_key}', extra={rest})",
        flush=True,
    )
    _refuse(args)
    ignore_term = os.environ.get("STAND_IN_IGNORE_TERM") == "1"
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    web.run_app(
        _app(args),
        host=args.host or "127.0.0.1",
        port=args.port,
        print=lambda m: print(m, flush=True),
        handle_signals=not ignore_term,
    )


if __name__ == "__main__":
    main()
