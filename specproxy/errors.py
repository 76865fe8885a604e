"""The one exception tree of specproxy.

::

    SpecproxyError
    ├── ConfigError            bad option, config key or description file  (exit 2)
    │   └── TraceFormatError   a trace line that cannot be read (names file and line)
    ├── ProtocolError          bytes from a server that break its protocol (bad SSE, bad JSON)
    ├── BackendError           a model server could not be used            (exit 3)
    │   ├── BackendUnreachable   connection refused / DNS / reset before a response
    │   └── BackendTimeout       no response or no progress within the deadline
    ├── PreflightFailed        `specproxy check` found a failing check      (exit 1)
    └── LaunchRejected         the server refused a launch configuration    (exit 1)

Only adapters (``specproxy.backends``) catch aiohttp's exceptions, and they
re-raise these ``from`` the original. A failed *request* is not an exception
anywhere above the adapter: it is a RequestRecord with an ErrorKind.
"""

from __future__ import annotations


class SpecproxyError(Exception):
    """Base of every error specproxy raises on purpose."""

    exit_code: int = 1


class ConfigError(SpecproxyError):
    """An option, config key or description file is wrong; the message names it."""

    exit_code = 2


class TraceFormatError(ConfigError):
    """A trace record cannot be read; carries the file and 1-based line number."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        super().__init__(f"{path}:{line}: {problem}")
        self.path = path
        self.line = line
        self.problem = problem


class ProtocolError(SpecproxyError):
    """A server sent bytes that do not follow its protocol."""


class BackendError(SpecproxyError):
    """A model server could not be used."""

    exit_code = 3


class BackendUnreachable(BackendError):
    """The connection failed before any response arrived."""


class BackendTimeout(BackendError):
    """The server did not answer, or stopped making progress, within the deadline."""


class PreflightFailed(SpecproxyError):
    """At least one preflight check failed."""

    exit_code = 1


class LaunchRejected(SpecproxyError):
    """The server refused the launch configuration; carries the server's own error text."""

    exit_code = 1

    def __init__(self, message: str, server_error: str = "") -> None:
        super().__init__(message)
        self.server_error = server_error
