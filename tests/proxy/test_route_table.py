"""The proxy's own routes (``proxy.routes.find``): handlers, 404 and 405 with ``Allow``."""

from __future__ import annotations

import orjson
import pytest

from specproxy.proxy import admin, routes
from specproxy.proxy.messages import Response


@pytest.mark.parametrize(
    ("method", "path", "handler"),
    [
        ("GET", "/health", routes.handle_health),
        ("GET", "/_specproxy/status", routes.handle_status),
        ("GET", "/_specproxy/metrics", routes.handle_metrics),
        ("GET", "/v1/models", admin.handle_read),
        ("GET", "/v1/models/some-model", admin.handle_read),
        ("POST", "/flush_cache", admin.handle_admin),
        ("GET", "/flush_cache", admin.handle_admin),
        ("PUT", "/set_internal_state", admin.handle_admin),
        ("POST", "/update_weights_from_disk", admin.handle_refused),
    ],
)
def test_each_own_route_finds_its_handler(method: str, path: str, handler: object) -> None:
    assert routes.find(method, path) is handler


@pytest.mark.parametrize(
    "path", ["/no/such/route", "/v1/models/a/b", "/v1/models/", "/health/", "/V1/models"]
)
def test_a_path_that_is_no_route_is_404(path: str) -> None:
    found = routes.find("GET", path)
    assert isinstance(found, Response) and found.status == 404
    assert orjson.loads(found.body)["error"]["code"] == "not_found"
    assert path.encode() not in found.body  # nothing of the request is echoed


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v1/chat/completions", "POST"),
        ("GET", "/generate", "POST, PUT"),
        ("HEAD", "/health", "GET"),
        ("POST", "/health", "GET"),
        ("DELETE", "/flush_cache", "GET, POST"),
        ("GET", "/update_weights_from_disk", "POST"),
    ],
)
def test_a_method_a_route_does_not_take_is_405_with_allow(
    method: str, path: str, allow: str
) -> None:
    found = routes.find(method, path)
    assert isinstance(found, Response) and found.status == 405
    assert found.headers["Allow"] == allow
    assert orjson.loads(found.body)["error"]["code"] == "method_not_allowed"


def test_every_relayed_route_is_in_the_table_without_a_handler() -> None:
    """The server relays them itself; the table knows them only for their 405."""
    from specproxy.proxy.routes import RELAYED

    for method, path in RELAYED:
        assert routes.ROUTES[path][method] is None
