"""A server's launch command supplied by the operator (``--baseline-launch``...) or read
from its own process on this host (``--launch-from-process``).

Only for a server URL on a loopback address (127.0.0.0/8, ``localhost``, ``::1``), only
when the operator asks for it, and only as far as this user may read: the listening
socket of the URL's port is found in ``/proc/net/tcp`` and ``/proc/net/tcp6``, its owner
by the ``socket:[inode]`` links under ``/proc/<pid>/fd``, and the command in
``/proc/<pid>/cmdline``. Anything that cannot be read (another user's process, no
``/proc``) gives None: the command then stays unknown, as without the option.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

from specproxy.core.launch.command import launch_source, parse_command, with_command
from specproxy.core.launch.config import LaunchConfig

_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp
PROC = Path("/proc")


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is a loopback address (a name other than localhost is not)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listening_inodes(port: int, proc: Path) -> set[str]:
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if (
                len(fields) > 9
                and fields[3] == _LISTEN
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                inodes.add(fields[9])
    return inodes


def listening_pid(port: int, proc: Path = PROC) -> int | None:
    """The process listening on TCP ``port`` of this host, when this user can see it."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port, proc)}
    if not wanted:
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            links = {str(fd.readlink()) for fd in (entry / "fd").iterdir()}
        except OSError:  # another user's process, or one that just ended
            continue
        if links & wanted:
            return int(entry.name)
    return None


def process_command(url: str, proc: Path = PROC) -> list[str] | None:
    """The argv of the process serving ``url`` on this host; None when it is not on a
    loopback address or cannot be read."""
    port = urlsplit(url).port
    if not is_loopback(url) or port is None:
        return None
    pid = listening_pid(port, proc)
    if pid is None:
        return None
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    argv = [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
    return argv or None


def supplied_launch(
    config: LaunchConfig | None, url: str | None, command: str | None, from_process: bool
) -> LaunchConfig | None:
    """``config`` with the full launch command the operator supplied: ``command`` (text,
    source ``declared``), else, with ``from_process``, the command of the process serving
    ``url`` on this host (source ``process``). A config whose server reported its own
    command, or that has none (the server was not read), is returned unchanged."""
    if config is None or launch_source(config) == "server":
        return config
    if command is not None:
        return with_command(config, parse_command(command), "declared")
    argv = process_command(url) if from_process and url else None
    return with_command(config, argv, "process") if argv else config
