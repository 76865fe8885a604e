"""tools.path: the modules one proxied request runs through are the ones the README draws,
and its calls go down that list but for the callbacks the README names."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tools.path import PACKAGE, Tracer, path_modules, trace

README = Path(__file__).resolve().parent.parent / "README.md"
# The ways back up the path the README names: the Exchange's on_body (to the client's
# answer) and on_sent (to the relay), RecordSteps' fold and write (ProxyRecords' own),
# and the serving half of the connection calling its reading half.
CALLBACKS = {
    ("backends/h1.py", "proxy/client_answer.py"),
    ("backends/h1.py", "proxy/relay.py"),
    ("recording/recorder.py", "proxy/records.py"),
    ("proxy/lean.py", "proxy/intake.py"),
}


def drawn_path() -> list[str]:
    """The modules of the README's "One proxied request" block, in its order."""
    text = README.read_text(encoding="utf-8")
    start = text.index("**One proxied request, from socket to record**")
    block = text[start:].split("```")[1]
    return re.findall(r"^\s*((?:proxy|backends|recording)/\w+\.py)", block, re.M)


@pytest.fixture(scope="module")
def traced() -> Tracer:
    return trace()


def test_the_readme_draws_eight_modules_once_each() -> None:
    drawn = drawn_path()
    assert len(drawn) == len(set(drawn)) == 8
    assert drawn[0] == "proxy/intake.py" and drawn[-1] == "backends/exchange.py"


def test_one_proxied_request_runs_through_the_drawn_modules(traced: Tracer) -> None:
    assert path_modules(traced) == sorted(drawn_path())


def test_calls_go_down_the_drawn_path_but_for_its_callbacks(traced: Tracer) -> None:
    order = {module: i for i, module in enumerate(drawn_path())}
    up = {
        (caller, callee)
        for caller, callee in traced.calls
        if caller in order and callee in order and order[callee] < order[caller]
    }
    assert up <= CALLBACKS, up - CALLBACKS


def test_the_tracer_counts_the_package_but_not_its_stand_ins() -> None:
    """The simulator and the test harness stand in for the upstreams and the client."""
    tracer = Tracer()

    def frame_in(path: Path) -> Any:
        return SimpleNamespace(f_code=SimpleNamespace(co_filename=str(path)))

    assert tracer.module(frame_in(PACKAGE / "proxy" / "relay.py")) == "proxy/relay.py"
    assert tracer.module(frame_in(PACKAGE / "sim" / "app.py")) is None
    assert tracer.module(frame_in(PACKAGE / "testing" / "harness.py")) is None
    assert tracer.module(frame_in(README)) is None
    assert tracer.module(None) is None
