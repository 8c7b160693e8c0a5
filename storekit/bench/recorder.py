"""What an engine's timed loop records into, and what an engine hands the worker: the machinery the
engines share, apart from the worker that runs them (so an engine never imports the worker)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from storekit.bench.stats import LatencyHistogram, ProgressTrace


class Recorder:
    """Per-worker (or per-thread) latency histogram, progress trace and totals."""

    def __init__(self) -> None:
        self.wall_offset = time.time_ns() - time.perf_counter_ns()
        self.latency = LatencyHistogram()
        self.trace = ProgressTrace()
        self.bytes = 0
        self.ops = 0

    @staticmethod
    def now() -> int:
        return time.perf_counter_ns()

    def op(self, t0: int, t1: int, nbytes: int) -> None:
        self.latency.record(t1 - t0)
        self.trace.add(t1 + self.wall_offset, nbytes)
        self.bytes += nbytes
        self.ops += 1

    def batch(self, t1: int, latencies: np.ndarray, nbytes: int) -> None:
        self.latency.record_many(latencies)
        self.trace.add(t1 + self.wall_offset, nbytes, len(latencies))
        self.bytes += nbytes
        self.ops += len(latencies)

    def bulk(
        self, starts: Sequence[int] | np.ndarray, ends: Sequence[int] | np.ndarray, nbytes: int | list[int]
    ) -> None:
        """Record many operations at once (monotonic start/end ns): tight loops only append times."""
        if len(ends) == 0:
            return
        t0 = np.asarray(starts, dtype=np.int64)
        t1 = np.asarray(ends, dtype=np.int64)
        sizes = np.full(len(t1), nbytes, dtype=np.int64) if isinstance(nbytes, int) else np.asarray(nbytes)
        self.latency.record_many(t1 - t0)
        self.trace.add_many(t1 + self.wall_offset, sizes)
        self.bytes += int(sizes.sum())
        self.ops += len(t1)

    def absorb(self, other: Recorder) -> None:
        self.latency.merge(other.latency)
        self.trace.merge(other.trace)
        self.bytes += other.bytes
        self.ops += other.ops


class Job(Protocol):
    """A prepared piece of work: `run` is the timed part."""

    engine: str
    direct: bool | None
    notes: list[str]

    def run(self, rec: Recorder) -> None: ...

    def close(self) -> None: ...


def run_recorded_threads(count: int, body: Any, rec: Recorder) -> None:
    """Run `body(i, recorder)` in `count` threads (I/O releases the GIL) and merge their recorders."""
    recorders = [Recorder() for _ in range(count)]
    errors: list[BaseException] = []

    def wrapped(i: int) -> None:
        try:
            body(i, recorders[i])
        except BaseException as exc:  # re-raised in the worker below
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    for r in recorders:
        rec.absorb(r)
