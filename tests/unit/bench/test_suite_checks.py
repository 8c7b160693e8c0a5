"""The honesty checks the coordinator runs on results: throttling, CPU-bound workers, RGW delayed ACKs."""

from __future__ import annotations

from pathlib import Path

from storekit.bench.patterns import build_plan
from storekit.bench.results import WorkerResult, merge_phase
from storekit.bench.scratch import PosixScratch
from storekit.bench.spec import TargetSpec, build_spec
from storekit.bench.stats import FINE_NS
from storekit.bench.suite import Suite

SECOND = 1_000_000_000
T0 = 1_700_000_000 * SECOND


def suite(tmp_path: Path, kind: str = "posix") -> Suite:
    target = TargetSpec(kind=kind, root=str(tmp_path) if kind == "posix" else "bucket/p")
    plan = build_plan(build_spec(target, pattern="shards", size="8M", file_size="1M"), "t", "/run")
    return Suite(plan, PosixScratch(TargetSpec(kind="posix", root=str(tmp_path)), "t"))


def worker(rates_mb: list[float], user_s: float = 0.1, sys_s: float = 0.1) -> WorkerResult:
    """A worker moving rates_mb[i] MB during second i (evenly over its 10 ms buckets)."""
    r = WorkerResult(worker=0, op="write", host="h", pid=1, start_ns=T0, end_ns=T0 + len(rates_mb) * SECOND)
    for second, mb in enumerate(rates_mb):
        for i in range(100):
            r.trace.add(T0 + second * SECOND + i * FINE_NS, int(mb * 1e6 / 100))
            r.latency.record(1000)
    r.bytes = int(sum(rates_mb) * 1e6)
    r.ops = 100 * len(rates_mb)
    r.cpu_user_s, r.cpu_sys_s = user_s, sys_s
    return r


def test_a_phase_that_slows_down_is_flagged_and_a_steady_one_is_not(tmp_path: Path) -> None:
    s = suite(tmp_path)
    point = s.plan.points[0]
    s._throttle_check(point, "write", [merge_phase("write", [worker([900, 900, 900, 900, 900, 900])])])
    assert s.warnings == []
    s._throttle_check(point, "write", [merge_phase("write", [worker([900, 900, 800, 300, 250, 250, 250])])])
    assert len(s.warnings) == 1 and "fell from 900 to 250 MB/s" in s.warnings[0]


def test_cpu_bound_workers_are_reported_as_python_or_kernel_bound(tmp_path: Path) -> None:
    s = suite(tmp_path)
    point = s.plan.points[0]
    s._cpu_check(point, "write", [merge_phase("write", [worker([100] * 2, user_s=1.5, sys_s=0.4)])])
    s._cpu_check(point, "read", [merge_phase("read", [worker([100] * 2, user_s=0.2, sys_s=1.8)])])
    s._cpu_check(point, "stat", [merge_phase("stat", [worker([100] * 2, user_s=0.2, sys_s=0.2)])])
    s._cpu_warning()
    assert len(s.warnings) == 2
    assert "user space (Python)" in s.warnings[0] and "write" in s.warnings[0]
    assert "in the kernel" in s.warnings[1] and "read" in s.warnings[1]


def test_small_gets_waiting_for_delayed_acks_are_explained_once(tmp_path: Path) -> None:
    s = suite(tmp_path, kind="s3")

    def phase(name: str, p50: float) -> dict[str, object]:
        return {"phase": name, "summary": {"latency": {"p50_ms": p50}}}

    s._delayed_ack_check([phase("head", 3.0), phase("get", 44.0)])
    s._delayed_ack_check([phase("head", 3.1), phase("get", 43.0)])
    assert len(s.warnings) == 1 and "tcp_nodelay" in s.warnings[0]
    fresh = suite(tmp_path, kind="s3")
    fresh._delayed_ack_check([phase("head", 3.0), phase("get", 8.0)])
    assert fresh.warnings == []
