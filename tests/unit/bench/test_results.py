"""Bandwidth, stonewall and straggler math on synthetic worker timings."""

from __future__ import annotations

import pytest

from storekit.bench.results import WorkerResult, merge_phase
from storekit.bench.stats import FINE_NS, LatencyHistogram

SECOND = 1_000_000_000
T0 = 1_700_000_000 * SECOND  # wall clock, on a 10 ms boundary


def worker(
    index: int, start_s: float, seconds: float, total_bytes: int, op_ns: int = 1_000_000
) -> WorkerResult:
    """A worker moving `total_bytes` evenly, one op per 10 ms, from start_s for `seconds`."""
    start = T0 + int(start_s * SECOND)
    r = WorkerResult(
        worker=index, op="read", host="h", pid=index, start_ns=start, end_ns=start + int(seconds * SECOND)
    )
    steps = int(seconds * SECOND // FINE_NS)
    for i in range(steps):
        r.trace.add(start + i * FINE_NS + FINE_NS // 2, total_bytes // steps)
        r.latency.record(op_ns)
    r.bytes = total_bytes // steps * steps
    r.ops = steps
    r.cpu_user_s, r.cpu_sys_s = 0.1 * seconds, 0.2 * seconds
    return r


def test_bandwidth_is_all_bytes_over_last_finish_minus_first_start() -> None:
    a = worker(0, 0.0, 1.0, 100_000_000)
    b = worker(1, 0.5, 1.0, 100_000_000)
    phase = merge_phase("read", [a, b])
    assert phase.elapsed_s == pytest.approx(1.5)
    assert phase.bandwidth == pytest.approx(200_000_000 / 1.5)
    assert phase.ops_per_s == pytest.approx(200 / 1.5)


def test_stonewall_counts_only_the_window_where_all_workers_ran() -> None:
    a = worker(0, 0.0, 1.0, 100_000_000)
    b = worker(1, 0.5, 1.0, 100_000_000)
    sw = merge_phase("read", [a, b]).stonewall
    assert sw["window_s"] == pytest.approx(0.5)
    # in [0.5, 1.0] each worker moves 100 MB/s: 200 MB/s together, more than the 133 MB/s overall
    assert sw["bandwidth_bytes_per_s"] == pytest.approx(200_000_000, rel=0.01)
    assert sw["note"] is None


def test_stonewall_is_absent_when_workers_never_overlap() -> None:
    a = worker(0, 0.0, 1.0, 10_000_000)
    b = worker(1, 1.5, 1.0, 10_000_000)
    sw = merge_phase("read", [a, b]).stonewall
    assert sw["bandwidth_bytes_per_s"] is None
    assert "never all active" in sw["note"]


def test_single_worker_stonewall_is_its_own_rate() -> None:
    sw = merge_phase("read", [worker(0, 0.0, 2.0, 200_000_000)]).stonewall
    assert sw["bandwidth_bytes_per_s"] == pytest.approx(100_000_000, rel=0.01)


def test_straggler_table_flags_the_slow_worker_and_reports_cpu() -> None:
    workers = [worker(i, 0.0, 1.0, 50_000_000) for i in range(3)] + [worker(3, 0.0, 2.0, 50_000_000)]
    phase = merge_phase("read", workers)
    rows = {r["worker"]: r for r in phase.stragglers}
    assert rows[3]["straggler"] and rows[3]["slowdown"] == pytest.approx(2.0)
    assert not any(rows[i]["straggler"] for i in range(3))
    assert rows[0]["bandwidth_bytes_per_s"] == pytest.approx(50_000_000, rel=0.01)
    assert rows[0]["cpu_pct_of_core"] == pytest.approx(30.0)
    assert phase.cpu["cores_used"] == pytest.approx((0.3 * 3 + 0.6) / 2.0)
    assert phase.cpu["max_worker_pct_of_core"] == pytest.approx(30.0)


def test_results_merge_the_same_after_a_round_trip_through_plain_data() -> None:
    workers = [worker(i, 0.01 * i, 1.0, 30_000_000, op_ns=1_000_000 * (i + 1)) for i in range(4)]
    direct = merge_phase("read", workers)
    shipped = merge_phase("read", [WorkerResult.from_dict(w.to_dict()) for w in workers])
    assert shipped.to_dict() == direct.to_dict()
    expected = LatencyHistogram()
    for w in workers:
        expected.merge(w.latency)
    assert direct.latency.percentile(99) == expected.percentile(99)
    assert direct.latency.percentile(99) == pytest.approx(4_000_000, rel=0.02)


def test_a_phase_says_what_its_window_covers_and_the_longest_settle_before_it() -> None:
    workers = [worker(i, 0.0, 1.0, 10_000_000) for i in range(3)]
    for w, settle in zip(workers, (0.002, 0.250, 0.0), strict=True):
        w.op, w.settle_s = "write", settle
    shipped = [WorkerResult.from_dict(w.to_dict()) for w in workers]
    phase = merge_phase("write", shipped).to_dict()
    assert phase["settle_s"] == 0.25
    assert "created empty before the start barrier" in phase["window"] and "fsync" in phase["window"]
    stat = worker(0, 0.0, 1.0, 0)
    stat.op = "stat"
    assert merge_phase("stat", [stat]).to_dict()["window"].startswith("per file: the stat() call alone")
    s3 = worker(0, 0.0, 1.0, 0)
    s3.op, s3.engine = "create", "boto3"
    assert merge_phase("put", [s3]).to_dict()["window"].startswith("each request")
