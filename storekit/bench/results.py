"""What a worker returns, and how a phase's worker results merge (across processes or hosts).

A `WorkerResult` is plain data (`to_dict`/`from_dict`), so results from workers on other nodes can be
shipped back and merged the same way as local ones. Times are wall-clock nanoseconds.

Bandwidth follows IOR: all bytes over (last finish - first start). The stonewall rate only counts the
window in which every worker was running (last start .. first finish), which hides start-up skew
and stragglers; the straggler table shows who made the difference.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from storekit.bench.stats import MIN_STONEWALL_NS, LatencyHistogram, ProgressTrace, series, series_bucket_ns

# What each operation's timed window covers (in --json as the phase's "window"). Where fio has the
# same operation the window is fio's, except where said.
WINDOWS = {
    "write": "each file (created empty before the start barrier) from its open through every block "
    "and fsync to its close; fio rw=write end_fsync=1 times the same",
    "read": "each file from its open through every block to its close",
    "randread": "each request from submission to completion, for --duration seconds",
    "create": "per file: open(O_CREAT|O_EXCL), write of the payload and close; fio's filecreate times "
    "the open alone (the close of an empty file adds ~1 us)",
    "stat": "per file: the stat() call alone, as fio's filestat",
    "readsmall": "per file: open, read and close",
    "delete": "per file: the unlink() call alone, as fio's filedelete",
}
S3_WINDOW = "each request, from sending it to the last byte of its response"
STRAGGLER_SLOWDOWN = 1.2  # a worker taking 20% longer than the median worker is flagged
CPU_BOUND_PCT = 85.0  # a worker using this much of a core is CPU-bound
PYTHON_BOUND_PCT = 50.0  # ...and with this much in user space, the ceiling may be Python's


@dataclass
class WorkerResult:
    worker: int
    op: str
    host: str
    pid: int
    start_ns: int
    end_ns: int
    bytes: int = 0
    ops: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    trace: ProgressTrace = field(default_factory=ProgressTrace)
    cpu_user_s: float = 0.0
    cpu_sys_s: float = 0.0
    direct: bool | None = None  # O_DIRECT in effect (None: not applicable, e.g. S3 or metadata)
    engine: str = ""
    notes: list[str] = field(default_factory=list)
    settle_s: float = 0.0  # untimed sync of the target's filesystem before the start barrier
    node: str = ""  # the Slurm node name (SLURMD_NODENAME) when run by a bench/cluster agent

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "worker": self.worker,
            "op": self.op,
            "host": self.host,
            "pid": self.pid,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "bytes": self.bytes,
            "ops": self.ops,
            "latency": self.latency.to_dict(),
            "trace": self.trace.to_dict(),
            "cpu_user_s": self.cpu_user_s,
            "cpu_sys_s": self.cpu_sys_s,
            "direct": self.direct,
            "engine": self.engine,
            "notes": self.notes,
            "settle_s": self.settle_s,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerResult:
        return cls(
            worker=int(data["worker"]),
            op=str(data["op"]),
            host=str(data["host"]),
            pid=int(data["pid"]),
            start_ns=int(data["start_ns"]),
            end_ns=int(data["end_ns"]),
            bytes=int(data["bytes"]),
            ops=int(data["ops"]),
            latency=LatencyHistogram.from_dict(data["latency"]),
            trace=ProgressTrace.from_dict(data["trace"]),
            cpu_user_s=float(data["cpu_user_s"]),
            cpu_sys_s=float(data["cpu_sys_s"]),
            direct=data.get("direct"),
            engine=str(data.get("engine", "")),
            notes=list(data.get("notes", [])),
            settle_s=float(data.get("settle_s", 0.0)),
            node=str(data.get("node", "")),
        )


@dataclass
class PhaseResult:
    phase: str
    op: str
    workers: int
    bytes: int
    ops: int
    first_start_ns: int
    last_finish_ns: int
    latency: LatencyHistogram
    stonewall: dict[str, Any]
    series: list[dict[str, float]]
    stragglers: list[dict[str, Any]]
    cpu: dict[str, float]
    direct: bool | None
    engine: str
    notes: list[str]
    settle_s: float = 0.0
    worker_results: list[WorkerResult] = field(default_factory=list, repr=False)
    series_bucket_s: float = 1.0

    @property
    def elapsed_s(self) -> float:
        return max(self.last_finish_ns - self.first_start_ns, 1) / 1e9

    @property
    def bandwidth(self) -> float:
        return self.bytes / self.elapsed_s

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.elapsed_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "op": self.op,
            "workers": self.workers,
            "bytes": self.bytes,
            "ops": self.ops,
            "elapsed_s": self.elapsed_s,
            "bandwidth_bytes_per_s": self.bandwidth,
            "ops_per_s": self.ops_per_s,
            "stonewall": self.stonewall,
            "latency": self.latency.summary_ms(),
            "series": self.series,
            "series_bucket_s": self.series_bucket_s,
            "stragglers": self.stragglers,
            "cpu": self.cpu,
            "direct": self.direct,
            "engine": self.engine,
            "notes": self.notes,
            "window": S3_WINDOW if self.engine.startswith("boto3") else WINDOWS.get(self.op, ""),
            "settle_s": self.settle_s,
        }


def merge_phase(phase: str, results: list[WorkerResult]) -> PhaseResult:
    """One phase's numbers from all its workers' results, wherever they ran."""
    if not results:
        raise ValueError(f"phase {phase}: no worker results to merge")
    first_start = min(r.start_ns for r in results)
    last_start = max(r.start_ns for r in results)
    first_finish = min(r.end_ns for r in results)
    last_finish = max(r.end_ns for r in results)
    bucket = series_bucket_ns(last_finish - first_start)
    latency = LatencyHistogram()
    for r in results:
        latency.merge(r.latency)
    directs = {r.direct for r in results}
    notes = sorted({n for r in results for n in r.notes})
    return PhaseResult(
        phase=phase,
        op=results[0].op,
        workers=len(results),
        bytes=sum(r.bytes for r in results),
        ops=sum(r.ops for r in results),
        first_start_ns=first_start,
        last_finish_ns=last_finish,
        latency=latency,
        stonewall=stonewall(results, last_start, first_finish),
        series=series([r.trace for r in results], first_start, last_finish, bucket),
        series_bucket_s=bucket / 1e9,
        stragglers=straggler_table(results, first_start),
        cpu=cpu_summary(results, (last_finish - first_start) / 1e9),
        direct=None if directs == {None} else all(bool(d) for d in directs),
        engine="+".join(sorted({r.engine for r in results if r.engine})),
        notes=notes,
        settle_s=max(r.settle_s for r in results),
        worker_results=results,
    )


def stonewall(results: list[WorkerResult], window_start: int, window_end: int) -> dict[str, Any]:
    """Rates over the window in which all workers were active."""
    window = window_end - window_start
    if len(results) == 1:
        window_start, window_end = results[0].start_ns, results[0].end_ns
        window = window_end - window_start
    if window < MIN_STONEWALL_NS:
        why = "workers were never all active at once" if window <= 0 else "all-active window under 50 ms"
        return {
            "window_s": max(window, 0) / 1e9,
            "bandwidth_bytes_per_s": None,
            "ops_per_s": None,
            "note": why,
        }
    nbytes = nops = 0.0
    for r in results:
        b, o = r.trace.amount_between(window_start, window_end)
        nbytes += b
        nops += o
    seconds = window / 1e9
    return {
        "window_s": seconds,
        "bandwidth_bytes_per_s": nbytes / seconds,
        "ops_per_s": nops / seconds,
        "note": None,
    }


def straggler_table(results: list[WorkerResult], first_start: int) -> list[dict[str, Any]]:
    durations = [max(r.end_ns - r.start_ns, 1) for r in results]
    median = statistics.median(durations)
    rows = []
    for r, duration in sorted(zip(results, durations, strict=True), key=lambda x: x[0].worker):
        seconds = duration / 1e9
        p99 = r.latency.percentile(99)
        rows.append(
            {
                "worker": r.worker,
                "host": r.host,
                **({"node": r.node} if r.node else {}),
                "bytes": r.bytes,
                "ops": r.ops,
                "start_offset_s": (r.start_ns - first_start) / 1e9,
                "elapsed_s": seconds,
                "bandwidth_bytes_per_s": r.bytes / seconds,
                "ops_per_s": r.ops / seconds,
                "p99_ms": None if p99 is None else p99 / 1e6,
                "slowdown": duration / median,
                "straggler": duration / median > STRAGGLER_SLOWDOWN,
                "cpu_pct_of_core": 100.0 * (r.cpu_user_s + r.cpu_sys_s) / seconds,
            }
        )
    return rows


def cpu_summary(results: list[WorkerResult], wall_s: float) -> dict[str, float]:
    """The benchmark's own CPU use, so a Python ceiling is not mistaken for a storage ceiling."""
    user = sum(r.cpu_user_s for r in results)
    system = sum(r.cpu_sys_s for r in results)

    def pct(r: WorkerResult, seconds: float) -> float:
        return 100.0 * seconds / max((r.end_ns - r.start_ns) / 1e9, 1e-9)

    busiest = max(results, key=lambda r: pct(r, r.cpu_user_s + r.cpu_sys_s))
    return {
        "user_s": user,
        "sys_s": system,
        "cores_used": (user + system) / max(wall_s, 1e-9),
        "max_worker_pct_of_core": pct(busiest, busiest.cpu_user_s + busiest.cpu_sys_s),
        "max_worker_user_pct_of_core": pct(busiest, busiest.cpu_user_s),
    }


def per_node(phase: str, repeats: list[PhaseResult]) -> list[dict[str, Any]]:
    """Each node's own numbers for one phase (median over repeats): bytes over that node's first
    start to last finish, as the aggregate is over all nodes'. Empty on one machine."""
    nodes = sorted({w.node for r in repeats for w in r.worker_results if w.node})
    if len(nodes) < 2:
        return []
    rows = []
    for node in nodes:
        merged = [
            merge_phase(phase, mine)
            for r in repeats
            if (mine := [w for w in r.worker_results if w.node == node])
        ]
        rows.append(
            {
                "node": node,
                "workers": merged[0].workers,
                "bytes": merged[0].bytes,
                "ops": merged[0].ops,
                "bandwidth_bytes_per_s": statistics.median(m.bandwidth for m in merged),
                "ops_per_s": statistics.median(m.ops_per_s for m in merged),
                "elapsed_s": statistics.median(m.elapsed_s for m in merged),
                "p99_ms": _p99_ms(merged),
            }
        )
    return rows


def _p99_ms(merged: list[PhaseResult]) -> float | None:
    latency = LatencyHistogram()
    for m in merged:
        latency.merge(m.latency)
    p99 = latency.percentile(99)
    return None if p99 is None else p99 / 1e6
