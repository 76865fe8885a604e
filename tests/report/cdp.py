"""A small Chrome DevTools Protocol client over aiohttp, for the browser test.

``HeadlessChromium`` starts Debian's ``chromium`` headless on a free loopback port,
opens one page and speaks the protocol over its websocket: commands get their answer,
and every event is kept so a test can read console messages, exceptions and log
entries afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from specproxy.runtime import spawn

_LISTENING = re.compile(rb"DevTools listening on (ws://\S+)")


def chromium() -> str | None:
    """The Chromium binary on PATH, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One page's websocket: ``call`` a method, ``wait_for`` an event, ``events`` so far."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._waiters: list[tuple[str, asyncio.Future[dict[str, Any]]]] = []
        self.events: list[dict[str, Any]] = []
        self._reader = spawn(self._read(), name="cdp-reader")

    async def _read(self) -> None:
        async for msg in self._ws:
            data = json.loads(msg.data)
            if "id" in data:
                self._answers.pop(data["id"]).set_result(data)
                continue
            self.events.append(data)
            for name, fut in list(self._waiters):
                if name == data.get("method") and not fut.done():
                    fut.set_result(data)
                    self._waiters.remove((name, fut))

    def expect(self, method: str) -> asyncio.Future[dict[str, Any]]:
        """A future for the next ``method`` event (register before causing it)."""
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters.append((method, fut))
        return fut

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        n = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[n] = fut
        await self._ws.send_str(json.dumps({"id": n, "method": method, "params": params}))
        answer = await asyncio.wait_for(fut, 60)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer.get("result", {})
        return result

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


@contextlib.asynccontextmanager
async def headless_page(binary: str, profile: Path) -> AsyncIterator[Page]:
    """A blank page in a fresh headless Chromium; the browser is stopped on exit."""
    proc = await asyncio.create_subprocess_exec(
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        "--window-size=1400,1000",
        "about:blank",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        browser_url = await asyncio.wait_for(_listening(proc.stderr), 60)
        drain = spawn(_drain(proc.stderr), name="chromium-stderr")
        http_base = "http://" + browser_url.split("/")[2]
        async with aiohttp.ClientSession() as session:
            async with session.put(f"{http_base}/json/new?about:blank") as resp:
                target = await resp.json(content_type=None)
            async with session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = Page(ws)
                try:
                    yield page
                finally:
                    await page.close()
                    drain.cancel()
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


async def _listening(stderr: asyncio.StreamReader) -> str:
    while line := await stderr.readline():
        found = _LISTENING.search(line)
        if found:
            return found.group(1).decode()
    raise RuntimeError("chromium exited before its DevTools endpoint was ready")


async def _drain(stderr: asyncio.StreamReader) -> None:
    while await stderr.readline():
        pass
