"""Where a server's full launch command came from, and a command the operator supplies.

SGLang 0.5.16 does not report its launch command (later versions put it in
``/server_info``'s ``launch_command``), so a server started by hand has none, and no
recommendation can name its launch. The operator can supply it:

- ``declared``: given as text (``--baseline-launch "python -m sglang.launch_server ..."``);
- ``process``: read from the server's own process on this host (``launch.local``);
- ``server``: reported by the server; ``launcher``: recorded by ``specproxy launch``.

A supplied command is parsed with ``shlex`` and kept, redacted, as the config's launcher
record with its ``source`` (``core.launch.config.with_launcher``, as for ``specproxy launch``).
Its ``--flag value`` settings are read back into server-argument names (the inverse of
``launch.description.render_args``) and compared with what the server reports: a
command that disagrees with the running server is named as such, never taken on trust.

Pure: no I/O.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from specproxy.core.launch.config import LaunchConfig, redact_argv, with_launcher

SOURCES = ("server", "launcher", "declared", "process")
_IGNORED = ("host", "port", "api_key", "admin_api_key")  # per launch, or secret


def parse_command(text: str) -> list[str]:
    """A shell command line as an argv list; ValueError naming the problem."""
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"launch command cannot be read as a shell command: {exc}") from exc
    if not any(a.startswith("--") for a in argv):
        raise ValueError(f"launch command has no --options: {text[:80]!r}")
    return argv


def command_args(argv: Sequence[str]) -> dict[str, Any]:
    """``--model-path m --tp 2 --enable-metrics --x=1`` -> ``{"model_path": "m", "tp": "2",
    "enable_metrics": True, "x": "1"}`` (values stay text; several values make a list)."""
    args: dict[str, Any] = {}
    key: str | None = None
    for arg in argv:
        if arg.startswith("--"):
            name, sep, value = arg[2:].partition("=")
            key = name.replace("-", "_")
            args[key] = value if sep else True
            key = None if sep else key
        elif key is not None:
            held = args[key]
            args[key] = (
                arg if held is True else [*(held if isinstance(held, list) else [held]), arg]
            )
    return args


def with_command(config: LaunchConfig, argv: Sequence[str], source: str) -> LaunchConfig:
    """``config`` with ``argv`` as its full launch command, from ``source``."""
    if source not in SOURCES:
        raise ValueError(f"launch command source must be one of {', '.join(SOURCES)}")
    record = dict(config.data.get("launcher") or {})
    record.update(command=redact_argv(list(argv)), source=source)
    return with_launcher(config, record)


def launch_source(config: LaunchConfig | None) -> str | None:
    """Where ``config``'s full launch command came from (``SOURCES``), None without one."""
    if config is None:
        return None
    data = config.data
    if data.get("server_command"):
        return "server"
    launcher = data.get("launcher") or {}
    if launcher.get("command"):
        return str(launcher.get("source") or "launcher")
    return None


def _same(given: Any, reported: Any) -> bool:
    if given is True:
        return reported is True
    if isinstance(given, list):
        return isinstance(reported, list) and [str(g) for g in given] == [str(r) for r in reported]
    return str(given) == str(reported) or str(given).lower() == str(reported).lower()


def disagreements(config: LaunchConfig | None) -> list[str]:
    """Settings of a supplied command (declared or read from the process) that the server
    reports differently: ``"tp_size: command 2, server 1"``. Flags the server does not
    report under the same name are not compared."""
    if config is None or launch_source(config) not in ("declared", "process"):
        return []
    reported = config.server_args
    given = command_args((config.data.get("launcher") or {}).get("command") or [])
    return [
        f"{key}: command {value if value is not True else 'set'}, server {reported[key]}"
        for key, value in given.items()
        if key in reported and key not in _IGNORED and not _same(value, reported[key])
    ]
