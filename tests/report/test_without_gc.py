"""``report.scan.without_gc`` pauses the cyclic collector for a report's passes and gives
back the state it found, also when the pass fails."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from specproxy.errors import ConfigError
from specproxy.report import scan
from specproxy.report.scan import without_gc
from specproxy.report.write import report_for


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_the_collector_is_paused_inside_and_back_after(collector_on: None) -> None:
    seen = without_gc(gc.isenabled)()
    assert seen is False
    assert gc.isenabled()


def test_a_failure_gives_the_collector_back(collector_on: None) -> None:
    @without_gc
    def fails() -> None:
        raise ConfigError("requests.jsonl:3: not a request record")

    with pytest.raises(ConfigError, match="not a request record"):
        fails()
    assert gc.isenabled()


def test_a_paused_collector_stays_paused(collector_on: None) -> None:
    gc.disable()
    try:
        assert without_gc(lambda: 7)() == 7
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_report_scans_with_the_collector_paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collector_on: None
) -> None:
    from specproxy.testing.fabricate import experiment, make_records, write_run_dir

    run = write_run_dir(tmp_path / "run", make_records(n_pairs=12), experiment())
    states: list[bool] = []
    real = scan.ColumnBuilder.add

    def add(self: scan.ColumnBuilder, *args: object, **kwargs: object) -> bool:
        states.append(gc.isenabled())
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(scan.ColumnBuilder, "add", add)
    report = report_for([run])
    assert report.pairing.pairs == 12
    assert states and not any(states)
    assert gc.isenabled()
