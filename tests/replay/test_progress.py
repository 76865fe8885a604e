"""The replay's progress line: planned totals, an ETA and thousands separators."""

from __future__ import annotations

from pathlib import Path

from specproxy.core.records.model import Role
from specproxy.recording.recorder import Recorder
from specproxy.replay.modes import Job, Window
from specproxy.replay.progress import (
    duration,
    planned_sends,
    progress_line,
    schedule_notice,
    schedule_times,
)
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


def test_open_loop_eta_follows_the_schedule_not_the_rate(tmp_path: Path) -> None:
    """Open loop: 20 of 40 sends done with the schedule's last send 300 s after the 20th:
    the ETA is 5:00 whatever the rate so far (here 20 sends in 1 s would say 1 s)."""
    jobs = tuple(Job(i, (Role.BASELINE,), None, warmup=False) for i in range(40))
    offsets = tuple(
        i * 1_000_000 if i < 20 else 19_000_000 + (i - 19) * 15_000_000 for i in range(40)
    )
    times = schedule_times([Window(jobs, offsets, "main")])
    assert times is not None and times[19] == 19_000_000 and times[-1] == 319_000_000
    recorder = Recorder(tmp_path, experiment_id="eta")
    tally = Tally(recorder)
    for _ in range(20):
        tally.on_sent(Role.BASELINE)
    recorder.close()
    line = progress_line(tally, 1.0, {Role.BASELINE: 40}, times)
    assert line.endswith("| ETA 5:00 by the schedule"), line
    assert progress_line(tally, 1.0, {Role.BASELINE: 40}).endswith("| ETA 1 s")


def test_schedule_times_add_windows_and_count_both_sides() -> None:
    """Alternate windows run one after another; a mirror job is one send per side; a
    closed-loop window has no schedule."""
    both = (Role.BASELINE, Role.CANDIDATE)
    first = Window((Job(0, both, "p0", False), Job(1, both, "p1", False)), (0, 4_000_000), "a")
    second = Window((Job(2, (Role.CANDIDATE,), None, False),), (2_000_000,), "b")
    assert schedule_times([first, second]) == [0, 0, 4_000_000, 4_000_000, 6_000_000]
    assert schedule_times([first, Window(first.jobs, None, "closed")]) is None


def test_long_schedule_warns_before_sending() -> None:
    """Past ten minutes the notice is a warning naming what shortens the run (printed even
    off a terminal); a short schedule gets its length only (on a terminal); closed loop
    gets nothing."""
    jobs = tuple(Job(i, (Role.BASELINE,), None, warmup=False) for i in range(3))
    long = schedule_notice([Window(jobs, (0, 1_000_000, 3_480_000_000), "main")])
    assert long == (
        "specproxy replay: warning: the schedule sends 3 requests over 58:00 (open loop),"
        " longer than 10:00; --max-requests, --duration, --speed or --max-idle-s shorten it",
        True,
    )
    short = schedule_notice([Window(jobs, (0, 1_000_000, 2_000_000), "main")])
    assert short == ("specproxy replay: the schedule sends 3 requests over 2 s (open loop)", False)
    assert schedule_notice([Window(jobs, None, "closed")]) is None
