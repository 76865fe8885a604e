"""One server process: start it in its own process group, log it, wait for health, stop it.

The process's combined output is pumped line by line into ``logs/<role>.log``, with
credentials removed on the way (SGLang prints its ``server_args``, API key included),
and the last lines are kept for the refusal excerpt. ``stop`` sends SIGTERM to the
whole process group (SGLang runs a scheduler and a detokenizer as children), waits up
to a deadline, then sends SIGKILL. Health is polled on ``GET /health`` while the
process's own exit is watched, so a refused configuration is seen as soon as the
process dies rather than at the health deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections import deque
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import IO

from specproxy.backends.base import BackendSpec
from specproxy.backends.http import open_backend
from specproxy.core.launch.config import REDACTED, redact_command
from specproxy.errors import BackendTimeout, BackendUnreachable
from specproxy.runtime import spawn

_SECRET_REPR = re.compile(
    r"((?:admin_)?api_key|ssl_keyfile_password)=('[^']*'|\"[^\"]*\"|[^,)\s]+)"
)
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]+(?:Error|Exception)|AssertionError|KeyboardInterrupt)\b")
_TAIL_LINES = 200
_CHUNK = 65536


def _hide_value(match: re.Match[str]) -> str:
    """``api_key='sk-...'`` -> ``api_key='[redacted]'``; an unset ``api_key=None`` stays."""
    if match.group(2) == "None":
        return match.group(0)
    return f"{match.group(1)}={REDACTED!r}"


class HealthOutcome(StrEnum):
    HEALTHY = "healthy"
    EXITED = "exited"


class ServerProcess:
    """A started server; owns its process group, its log file and its output pump."""

    def __init__(
        self, name: str, proc: asyncio.subprocess.Process, log: IO[bytes], secrets: Sequence[str]
    ) -> None:
        self.name = name
        self._proc = proc
        self._log = log
        self._secrets = [s for s in secrets if s]
        self._tail: deque[str] = deque(maxlen=_TAIL_LINES)
        self._pump = spawn(self._pump_output(), name=f"log-pump-{name}")
        self._exited = spawn(self._wait_exit(), name=f"wait-exit-{name}")

    @classmethod
    async def start(
        cls,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str],
        secrets: Sequence[str] = (),
    ) -> ServerProcess:
        """Start ``argv`` in a new session (its own process group); output goes to ``log_path``."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = log_path.open("ab")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=dict(env),
                start_new_session=True,
            )
        except OSError:
            log.close()
            raise
        return cls(name, proc, log, secrets)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def _clean(self, line: str) -> str:
        for secret in self._secrets:
            line = line.replace(secret, REDACTED)
        return _SECRET_REPR.sub(_hide_value, redact_command(line))

    def _emit(self, raw: bytes) -> None:
        line = self._clean(raw.decode("utf-8", errors="replace"))
        self._tail.append(line.rstrip("\r\n"))
        self._log.write(line.encode("utf-8"))
        self._log.flush()

    async def _pump_output(self) -> None:
        stream = self._proc.stdout
        if stream is None:
            return
        pending = b""
        while chunk := await stream.read(_CHUNK):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self._emit(line + b"\n")
            if len(pending) > _CHUNK:  # a progress bar without newlines: write it as is
                self._emit(pending)
                pending = b""
        if pending:
            self._emit(pending + b"\n")

    async def _wait_exit(self) -> int:
        code = await self._proc.wait()
        await asyncio.wait({self._pump}, timeout=5.0)  # let the last lines reach the log
        return code

    async def wait_healthy(
        self, url: str, *, timeout_s: float, poll_s: float = 1.0
    ) -> HealthOutcome:
        """HEALTHY once ``GET /health`` answers 200; EXITED if the process dies first.

        Raises BackendTimeout when neither happens within ``timeout_s``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        async with open_backend(BackendSpec(url, None)) as server:
            while loop.time() < deadline:
                if self._exited.done():
                    return HealthOutcome.EXITED
                with contextlib.suppress(BackendUnreachable, BackendTimeout):
                    status, _ = await server.get("/health", timeout_s=min(poll_s * 5, 10.0))
                    if status == 200:
                        return HealthOutcome.HEALTHY
                await asyncio.wait(
                    {self._exited}, timeout=max(0.0, min(poll_s, deadline - loop.time()))
                )
        if self._exited.done():
            return HealthOutcome.EXITED
        raise BackendTimeout(f"{self.name}: {url}/health did not answer 200 within {timeout_s:g} s")

    async def wait_exit(self) -> int:
        """The exit status, once the process has ended."""
        return await asyncio.shield(self._exited)

    def error_excerpt(self) -> str:
        """The last error lines of the log (the ``ValueError``/``AssertionError`` SGLang raised)."""
        lines = [line for line in self._tail if line.strip()]
        for index in range(len(lines) - 1, -1, -1):
            if _ERROR_LINE.match(lines[index]):
                error = lines[index].strip()
                if ":" not in error and index > 0:  # a bare AssertionError: show the assert too
                    return f"{lines[index - 1].strip()}\n{error}"
                return error
        return "\n".join(lines[-5:])

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    async def stop(self, *, timeout_s: float) -> int:
        """SIGTERM to the process group, wait up to ``timeout_s``, then SIGKILL; returns the status."""
        if not self._exited.done():
            self._signal_group(signal.SIGTERM)
            await asyncio.wait({self._exited}, timeout=timeout_s)
        if not self._exited.done():
            self._signal_group(signal.SIGKILL)
            await asyncio.wait({self._exited})
        else:
            self._signal_group(signal.SIGKILL)  # children left behind by a parent that exited
        code = self._exited.result()
        self._log.close()
        return code
