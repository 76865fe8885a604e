"""The one rule for a server URL given on the command line or in a config file.

A server URL is the server's root (``http://127.0.0.1:30000``): specproxy adds the route
itself (``/v1/chat/completions``, ``/v1/completions``, ``/generate``, ``/health``...).
A URL ending in ``/v1`` (the OpenAI SDK's ``base_url``) or in one of those routes would
send every request to ``/v1/v1/...`` and fail with 404, so it is refused before anything
is sent, with the URL to give instead. ``serve``, ``replay``, ``sweep`` and ``check`` all
use this rule.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from specproxy.core.records.model import Route

_SCHEMES = ("http://", "https://")
_SUFFIXES = ("/v1", *(r.value for r in Route))


def server_url_problem(key: str, url: object) -> str | None:
    """Why ``url`` cannot be the server URL ``key`` (an option or config key), or None."""
    if not isinstance(url, str) or not url.startswith(_SCHEMES):
        return f"{key} must be an http:// or https:// URL, got {url!r}"
    path = urlsplit(url).path.rstrip("/")
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if path.endswith(suffix):
            root = url[: url.rfind(suffix)]
            return (
                f"{key} must be the server's root URL, without {suffix!r} (specproxy adds"
                f" /v1/... and /generate itself): give {root!r}, got {url!r}"
            )
    return None


def check_server_url(key: str, url: object) -> None:
    """Raise ValueError with ``server_url_problem``'s sentence; None passes (not given)."""
    if url is None:
        return
    problem = server_url_problem(key, url)
    if problem is not None:
        raise ValueError(problem)


ROOT_URL_HELP = " (its root, http://host:port: without /v1, which specproxy adds itself)."
"""The ``--help`` words every server URL option ends with."""
