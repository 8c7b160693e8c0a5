"""The 'throughput fell' warning is not raised by a write phase's fsync tail (buckets of 0 B/s after
the last write: the flush moves no new bytes), and is still raised by a real slowdown."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from storekit.bench.suite import Suite


def warnings_for(bytes_per_s: list[float], finishes: tuple[int, ...] = ()) -> list[str]:
    """The warnings for a phase with these 1 s buckets whose workers finished at `finishes` (ns)."""
    suite: Any = Suite.__new__(Suite)  # only the check under test: no plan, no scratch
    suite.warnings = []
    point: Any = SimpleNamespace(pattern="shards", label="w=4 bs=1M")
    rows = [{"t_s": i, "bytes_per_s": b, "ops_per_s": 0.0} for i, b in enumerate(bytes_per_s)]
    workers = [SimpleNamespace(end_ns=end) for end in finishes]
    result: Any = SimpleNamespace(series=rows, worker_results=workers, first_start_ns=0, series_bucket_s=1.0)
    suite._throttle_check(point, "write", [result])
    return list(suite.warnings)


def test_the_fsync_tail_of_a_write_phase_is_not_a_fall() -> None:
    # 256M at ~500 MB/s in 50 ms buckets, then the fsync of every file: no bytes, then the partial bucket
    assert warnings_for([5e8] * 10 + [0.0, 0.0, 0.0] + [0.0]) == []


def test_the_ramp_down_after_the_first_worker_finished_is_not_a_fall() -> None:
    # 4 workers: all active for 8 s, then they finish one by one (the shape of a real 256M run)
    series = [2.5e9, 3.8e9, 4.2e9, 2.9e9, 2.6e9, 2.9e9, 3.8e9, 2.9e9, 1.2e9, 0.3e9, 0.0]
    finishes = (8_000_000_000, 8_500_000_000, 9_200_000_000, 10_100_000_000)
    assert warnings_for(series, finishes) == []
    assert warnings_for(series) != []  # judged over the whole phase, as before: a false alarm


def test_a_real_slowdown_is_still_reported() -> None:
    (warning,) = warnings_for([5e8, 5e8, 5e8, 4e8, 1e8, 1e8, 2e7])
    assert warning.startswith("shards w=4 bs=1M write: throughput fell from 500 to 100 MB/s")
