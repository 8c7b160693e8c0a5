"""Progress: plain lines at a steady interval when stderr is not a terminal (driven by an injected
clock, no sleeps), and a bar that stays on one line in an 80-column terminal."""

from __future__ import annotations

import io
import re

from rich.console import Console

from storekit.cli.output import Output, _LiveLine
from storekit.cli.progress import PlainProgress, ProgressState, fit, progress_parts


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def prepare_state(started: float) -> ProgressState:
    return ProgressState(
        "tokenizing 1234 tasks", 50 * 2**30, started, transfer=True, rates={"docs": "docs", "tokens": "tok"}
    )


def test_plain_lines_come_at_a_steady_interval_and_at_the_end() -> None:
    clock, stream = FakeClock(), io.StringIO()
    plain = PlainProgress(prepare_state(clock.now), stream, interval=10, clock=clock, thread=False)
    assert stream.getvalue().count("\n") == 1  # a line as soon as the work starts
    for _ in range(25):  # 25 s of work, an update every second
        clock.now += 1
        plain.advance(2**30, {"docs": 100, "tokens": 50_000})
    plain.tick()  # a tick between updates writes nothing new: no interval has passed since 1010/1020
    clock.now += 4.5  # 29.5 s: still inside the third interval
    plain.tick()
    clock.now += 0.5  # 30 s: the third interval is over
    plain.tick()
    plain.close()
    lines = stream.getvalue().splitlines()
    # start, then one line per 10 s whatever the update rate, then the end
    assert [line.split(", ")[1].strip() for line in lines] == ["0%", "20%", "40%", "50%", "50%"]
    assert [re.search(r", (\d:\d\d:\d\d)(, eta|$)", line)[1] for line in lines] == [
        "0:00:00",
        "0:00:10",
        "0:00:20",
        "0:00:30",
        "0:00:30",
    ]
    assert lines[1] == (
        "progress: tokenizing 1234 tasks,  20%, 10.0 GiB/50.0 GiB, 1.1 GB/s, 100.0 docs/s, 50.0k tok/s, "
        "0:00:10, eta 0:00:40"
    )


def test_plain_progress_is_what_a_non_terminal_stderr_gets(capsys: object) -> None:
    out = Output()
    with out.progress("bench io", total=4, unit="phases") as bar:
        bar.advance(1)
        bar.advance(3)
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    lines = err.splitlines()
    assert lines[0].startswith("progress: bench io,   0%, 0/4 phases")
    assert lines[-1].startswith("progress: bench io, 100%, 4/4 phases")
    assert "\r" not in err and "\x1b" not in err  # no redraws, no escape codes in a log


def test_the_terminal_bar_stays_on_one_line_at_80_columns() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=80, color_system=None)
    state = prepare_state(0.0)
    state.advance(13 * 2**30, {"docs": 123_456_789, "tokens": 9_876_543_210})
    console.print(_LiveLine(state, console))
    (line,) = buffer.getvalue().splitlines()
    assert len(line) <= 80 and line.startswith("tokenizing 1234 tasks  ") and "%" in line
    assert re.search(r"  eta \d+:\d\d:\d\d$", line), line  # the README promises an ETA, at 80 columns too
    # every field while they fit; the rates, the clock and the bar go before the percentage and the ETA
    parts = progress_parts(state, 50.0, bar=True)
    assert parts[-1].startswith("eta ") and fit(parts, 500) == "  ".join(parts)
    at80 = fit(parts, 79)
    assert at80.endswith(parts[-1]) and f" {parts[2]}  {parts[3]}  " in at80  # percent, bytes, eta
    assert fit(parts, 45) == "  ".join([parts[0], parts[2], parts[-1]])
    assert fit(["a very long description indeed"], 10) == "a very lon"
