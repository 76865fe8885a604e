"""The replay's progress line: planned totals, an ETA and thousands separators."""

from __future__ import annotations

from pathlib import Path

from specproxy.core.model import Role
from specproxy.recording.recorder import Recorder
from specproxy.replay.modes import Job, Window
from specproxy.replay.progress import duration, planned_sends, progress_line
from specproxy.replay.summary import Tally


def _tally(tmp_path: Path, sent: int, completed: int) -> Tally:
    recorder = Recorder(tmp_path, experiment_id="progress")
    tally = Tally(recorder)
    for _ in range(sent):
        tally.on_sent(Role.BASELINE)
        tally.on_sent(Role.CANDIDATE)
    for role in Role:
        recorder.stats(role).requests = recorder.stats(role).completed = completed
    recorder.close()
    return tally


def test_line_shows_planned_total_and_eta(tmp_path: Path) -> None:
    """1,500 of 4,000 sent per side at 100 req/s leaves 5,000 sends: ETA 50 s."""
    tally = _tally(tmp_path, 1500, 1490)
    planned = {Role.BASELINE: 4000, Role.CANDIDATE: 4000}
    line = progress_line(tally, 30.0, planned)
    assert line == (
        "baseline 1,500/4,000 sent 1,490 ok 0 failed | candidate 1,500/4,000 sent 1,490 ok"
        " 0 failed | 100.0 req/s | 30 s | ETA 50 s"
    )


def test_no_eta_when_done_or_unplanned(tmp_path: Path) -> None:
    """No ETA once everything planned is sent, nor without a plan."""
    tally = _tally(tmp_path, 20, 20)
    done = progress_line(tally, 4.0, {Role.BASELINE: 20, Role.CANDIDATE: 20})
    assert "ETA" not in done and "20/20 sent" in done
    assert "ETA" not in progress_line(tally, 4.0)


def test_planned_sends_count_each_side_of_each_job() -> None:
    """A mirror job counts once per side; a split job once for its side."""
    jobs = (
        Job(0, (Role.BASELINE, Role.CANDIDATE), "p0", warmup=True),
        Job(1, (Role.BASELINE, Role.CANDIDATE), "p1", warmup=False),
        Job(2, (Role.CANDIDATE,), None, warmup=False),
    )
    counts = planned_sends([Window(jobs, (0, 1, 2), "main")])
    assert counts == {Role.BASELINE: 2, Role.CANDIDATE: 3}


def test_durations_read_as_clock_times() -> None:
    """Under a minute in seconds, then m:ss and h:mm:ss."""
    assert [duration(s) for s in (0.4, 59.4, 65, 3725)] == ["0 s", "59 s", "1:05", "1:02:05"]
