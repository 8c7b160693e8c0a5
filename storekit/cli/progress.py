"""Progress on stderr: one bar line in a terminal, plain lines at a steady interval everywhere else.

In a terminal the line is redrawn in place and never wider than the terminal (fields are dropped
from the right before anything wraps). In a Slurm batch log, under cron or `| tee`, a redrawn bar
would be one frame at the end; instead a plain line is written every `STOREKIT_PROGRESS_INTERVAL`
seconds (default 30) and once at the end, as rclone's `--stats` does.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO

from storekit.errors import UsageError
from storekit.units import format_bytes, rate_unit

DEFAULT_INTERVAL_S = 30.0
INTERVAL_ENV = "STOREKIT_PROGRESS_INTERVAL"
BAR_WIDTH = 20


def interval_from_env() -> float:
    """$STOREKIT_PROGRESS_INTERVAL in seconds (unset or empty: 30); anything else is a usage error,
    not a silent 30."""
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise UsageError(f"${INTERVAL_ENV}={raw!r}: expected seconds above 0, e.g. 10 or 0.5")
    return value


@dataclass
class ProgressState:
    """What a progress display shows; `fields` are counters with a per-second rate (docs, tokens)."""

    description: str
    total: float | None
    started: float
    unit: str = "items"
    transfer: bool = False  # completed/total are bytes
    rates: Mapping[str, str] = field(default_factory=dict)  # field -> label
    completed: float = 0.0
    fields: dict[str, float] = field(default_factory=dict)

    def advance(self, amount: float, counts: Mapping[str, float]) -> None:
        self.completed += amount
        for key, value in counts.items():
            self.fields[key] = self.fields.get(key, 0.0) + value


def _si(value: float) -> str:
    for unit in ("", "k", "M", "G", "T"):
        if abs(value) < 1000:
            return f"{value:.1f}{unit}"
        value /= 1000
    return f"{value:.1f}P"


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def progress_parts(state: ProgressState, now: float, *, bar: bool) -> list[str]:
    """The fields of one progress line, most important first."""
    elapsed = max(now - state.started, 0.0)
    parts = [state.description]
    fraction = None if not state.total else min(state.completed / state.total, 1.0)
    if bar:
        filled = round((fraction or 0.0) * BAR_WIDTH)
        parts.append("━" * filled + "╺" * (BAR_WIDTH - filled))
    if fraction is not None:
        parts.append(f"{fraction:4.0%}")
    if state.transfer:
        done = format_bytes(int(state.completed))
        parts.append(f"{done}/{format_bytes(int(state.total))}" if state.total else done)
        if elapsed > 0:  # decimal, as the summaries and fio/IOR report rates
            unit, scale = rate_unit(state.completed / elapsed)
            parts.append(f"{state.completed / elapsed / scale:.1f} {unit}")
    else:
        total = f"/{state.total:.0f}" if state.total else ""
        parts.append(f"{state.completed:.0f}{total} {state.unit}")
    if elapsed > 0:
        parts += [f"{_si(state.fields.get(k, 0.0) / elapsed)} {label}/s" for k, label in state.rates.items()]
    parts.append(_clock(elapsed))
    if fraction and elapsed > 0 and fraction < 1:
        parts.append(f"eta {_clock(elapsed * (1 - fraction) / fraction)}")
    return parts


_CLOCK = re.compile(r"^\d+:\d\d:\d\d$")


def _drop_order(parts: list[str]) -> list[int]:
    """Which fields go first when the line is too wide: the docs/tokens rates, the elapsed clock, the
    byte rate, the bar, the amount done. The description, the percentage and the ETA stay."""
    rates = [i for i in range(len(parts) - 1, 0, -1) if parts[i].endswith("/s")]
    byte_rate = [i for i in rates if parts[i].endswith("B/s")]
    clock = [i for i in range(1, len(parts)) if _CLOCK.match(parts[i])]
    bar = [i for i in range(1, len(parts)) if parts[i][:1] in ("━", "╺")]
    kept = {0} | {i for i, p in enumerate(parts) if p.endswith("%") or p.startswith("eta ")}
    order = [i for i in rates if i not in byte_rate] + clock + byte_rate + bar
    return order + [i for i in range(len(parts) - 1, 0, -1) if i not in kept and i not in order]


def fit(parts: list[str], width: int) -> str:
    """Join the fields that fit in `width` columns, dropping the least useful first (the description
    is cut if it alone does not fit)."""
    keep = list(range(len(parts)))
    for i in _drop_order(parts):
        if sum(len(parts[k]) for k in keep) + 2 * (len(keep) - 1) <= width:
            break
        keep.remove(i)
    line = parts[0][:width]
    for k in keep[1:]:
        if len(line) + 2 + len(parts[k]) > width:
            break
        line += "  " + parts[k]
    return line


class PlainProgress:
    """Plain lines for logs: one when started, one per interval while running, one at the end.

    `tick()` writes a line when an interval has passed on `clock`; a daemon thread calls it (and
    `advance` does too), tests call it with their own clock and no thread.
    """

    def __init__(
        self,
        state: ProgressState,
        stream: IO[str],
        *,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        thread: bool = True,
    ) -> None:
        self.state = state
        self._stream = stream
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._next = clock() + interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True) if thread else None
        self._write(clock())
        if self._thread is not None:
            self._thread.start()

    def _write(self, now: float) -> None:
        self._stream.write("progress: " + ", ".join(progress_parts(self.state, now, bar=False)) + "\n")
        self._stream.flush()

    def _run(self) -> None:
        while not self._stop.wait(min(self._interval, 1.0)):
            self.tick()

    def tick(self) -> None:
        with self._lock:
            now = self._clock()
            if now < self._next:
                return
            self._write(now)
            # steady: the next line is one interval after this one, however late this tick came
            self._next = now + self._interval

    def advance(self, amount: float, counts: Mapping[str, float]) -> None:
        with self._lock:
            self.state.advance(amount, counts)
        self.tick()

    def set_total(self, total: float | None) -> None:
        with self._lock:
            self.state.total = total

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._write(self._clock())
