"""Carry out a BenchPlan: setup, every sweep point x repeat x phase, honest caches, cleanup always.

The coordinator never does timed I/O itself; it creates directories, evicts the run's own files from
the page cache before read phases (the whole node's cache is dropped only with --drop-caches), checks
that every phase moved exactly the planned bytes, and removes what the run created, also on
Ctrl-C/SIGTERM (workers are stopped first).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Protocol

from storekit.bench import env, native, pagecache, uring
from storekit.bench.plan import DATA_OPS, READING_OPS, BenchPlan, PhasePlan, PointPlan, iter_names
from storekit.bench.results import (
    CPU_BOUND_PCT,
    PYTHON_BOUND_PCT,
    PhaseResult,
    WorkerResult,
    merge_phase,
    per_node,
)
from storekit.bench.scratch import PosixScratch, S3Scratch
from storekit.bench.stats import LatencyHistogram, median_spread
from storekit.errors import Interrupted, StorekitError
from storekit.executors.base import phase_runner
from storekit.units import format_bytes

RESIDENT_WARN = 0.05
RESIDENT_SAMPLE = 32  # files whose residency (mincore) is checked after eviction
RAM_FACTOR = 2
DELAYED_ACK_MS = 35.0
THROTTLE_MIN_BUCKETS = 4  # seconds of full 1 s buckets before a slowdown is judged
THROTTLE_DROP = 0.6


class PhaseExecutor(Protocol):
    """Runs one phase's workers, all released together: an executor's registered phase runner
    (storekit.executors.base.phase_runner; `local`: bench/runner.py, `slurm`: bench/cluster/runner.py)."""

    def run(self, phase: PhasePlan, repeat: int) -> list[WorkerResult]: ...


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Let cleanup finish even if Ctrl-C is pressed again."""
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


class Suite:
    def __init__(
        self,
        plan: BenchPlan,
        scratch: PosixScratch | S3Scratch,
        *,
        progress: Callable[[int, int], None] | None = None,
        warn: Callable[[str], None] | None = None,
        executor: str = "local",
        runner: PhaseExecutor | None = None,
    ) -> None:
        """`progress(done, total)` after every phase; `warn(message)` for what needs saying at once
        (the CLI draws both; the findings for the report are in the result's "warnings");
        `executor`: which registered phase runner runs the workers (storekit.executors.base), or
        `runner` itself."""
        self.plan = plan
        self.executor = executor
        self.runner = runner
        self.spec = plan.spec
        self.scratch = scratch
        self.progress = progress or (lambda done, total: None)
        self.warn = warn or (lambda message: None)
        self.steps_done = 0
        self.steps = 0
        self.posix = self.spec.target.kind == "posix"
        self.warnings: list[str] = []
        self.honesty: dict[str, Any] = {}
        self.cpu_bound: list[tuple[str, bool]] = []
        self.delayed_ack_seen = False

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        spec, plan = self.spec, self.plan
        self.scratch.check(plan.space_needed)
        started = datetime.now(UTC)
        environment = env.capture(spec.target, uring.available() if self.posix else None)
        runner = self.make_runner()
        points: list[dict[str, Any]] = []
        setups: list[dict[str, Any]] = []
        cleanup: dict[str, Any] = {}
        try:
            self.scratch.create()
            self._check_direct(environment)
            self._small_file_timer(environment)
            self.steps = sum(len(p.phases) for p in plan.points) * spec.repeat + len(plan.setups)
            self.progress(0, self.steps)
            for pattern in spec.patterns:
                setup = next((s for s in plan.setups if s.pattern == pattern), None)
                if setup:
                    self.scratch.makedirs(setup.dirs)
                    result = self._run_phase(runner, setup.phase, 0)
                    setups.append({"pattern": pattern, **result.to_dict()})
                    self._step()
                for point in (p for p in plan.points if p.pattern == pattern):
                    points.append(self._run_point(runner, point))
                if setup:
                    self.scratch.remove(setup.created_paths())
                    self.scratch.remove_dirs(setup.dirs)
        except KeyboardInterrupt:
            with signals_deferred():
                cleanup = self.scratch.cleanup(plan.created_paths())
            where = self.scratch.run_root
            raise Interrupted(f"interrupted; stopped all workers and removed {where}") from None
        finally:
            if not cleanup:
                with signals_deferred():
                    cleanup = self.scratch.cleanup(plan.created_paths())
            if cleanup.get("leftovers"):
                self.warn(f"could not remove (not empty): {', '.join(cleanup['leftovers'][:5])}")
        self._ram_check(environment)
        self._cpu_warning()
        finished = datetime.now(UTC)
        return {
            "run_id": plan.run_id,
            "started_at": started.isoformat(),
            "finished_at": finished.isoformat(),
            "duration_s": (finished - started).total_seconds(),
            "environment": environment,
            "honesty": self.honesty,
            "setup": setups,
            "points": points,
            "cleanup": cleanup,
            "warnings": self.warnings,
        }

    def make_runner(self) -> PhaseExecutor:
        """The registered phase runner of `executor` (local: workers on this machine);
        bench.cluster overrides this to run them on Slurm nodes."""
        runner: PhaseExecutor = self.runner or phase_runner(self.executor, self.spec.target.kind)
        return runner

    def _step(self) -> None:
        self.steps_done += 1
        self.progress(self.steps_done, self.steps)

    def _run_point(self, runner: PhaseExecutor, point: PointPlan) -> dict[str, Any]:
        repeats: dict[str, list[PhaseResult]] = {ph.name: [] for ph in point.phases}
        caches: dict[str, list[dict[str, Any]]] = {ph.name: [] for ph in point.phases}
        for r in range(self.spec.repeat):
            self.scratch.makedirs(point.dirs)
            for phase in point.phases:
                caches[phase.name].append(self._before_read(phase) if phase.op in READING_OPS else {})
                repeats[phase.name].append(self._run_phase(runner, phase, r))
                self._step()
            self.scratch.remove(point.created_paths())
            self.scratch.remove_dirs(point.dirs)
        phases = []
        for phase in point.phases:
            results = repeats[phase.name]
            self._cpu_check(point, phase.name, results)
            self._throttle_check(point, phase.name, results)
            nodes = per_node(phase.name, results)
            phases.append(
                {
                    "phase": phase.name,
                    "op": phase.op,
                    "planned_bytes_per_repeat": phase.bytes,
                    "summary": summarize(results),
                    **({"nodes": nodes} if nodes else {}),
                    "cache": caches[phase.name],
                    "repeats": [res.to_dict() for res in results],
                }
            )
        if point.pattern == "meta" and not self.posix:
            self._delayed_ack_check(phases)
        return {"pattern": point.pattern, "params": point.params, "label": point.label, "phases": phases}

    def _run_phase(self, runner: PhaseExecutor, phase: PhasePlan, repeat: int) -> PhaseResult:
        result = merge_phase(phase.name, runner.run(phase, repeat))
        planned = phase.bytes
        if planned is not None and result.bytes != planned:
            raise StorekitError(f"{phase.name} phase moved {result.bytes} bytes; the plan says {planned}")
        if result.direct is False and self.spec.direct and self.posix and phase.op in DATA_OPS:
            self._warn_once("O_DIRECT was refused by the filesystem; buffered I/O was measured")
        return result

    # -- honesty ---------------------------------------------------------------------------------
    def _before_read(self, phase: PhasePlan) -> dict[str, Any]:
        """Evict this run's own files (never anyone else's cache); drop the node's only when asked."""
        if not self.posix:
            return {"applicable": False}
        if self.spec.drop_caches:
            done, why = pagecache.drop_caches()
            if not done:
                self._warn_once(f"page cache not dropped: {why}; the run's own files are evicted instead")
        else:
            done, why = False, "not requested (--drop-caches): only this run's files are evicted"
        self.honesty.setdefault(
            "drop_caches", {"requested": self.spec.drop_caches, "done": done, "reason": why or None}
        )
        info: dict[str, Any] = {"dropped": done, "reason": why or None}
        if phase.op in DATA_OPS:
            groups = [t.files for t in phase.tasks]
            info["evicted_files"] = pagecache.evict(map(self.scratch.full, iter_names(groups)))
            sample = itertools.islice(map(self.scratch.full, iter_names(groups)), RESIDENT_SAMPLE)
            resident = pagecache.resident_fraction(sample)
            info["resident_before"] = resident
            self._record_eviction(info["evicted_files"], resident)
            if resident is not None and resident > RESIDENT_WARN:
                self._warn_once(
                    f"{resident:.0%} of the data was in the page cache before a {phase.name} phase: "
                    "the filesystem keeps pages despite O_DIRECT/eviction, reads may measure memory"
                )
        return info

    def _record_eviction(self, files: int, resident: float | None) -> None:
        ev = self.honesty.setdefault(
            "eviction",
            {
                "method": "posix_fadvise(POSIX_FADV_DONTNEED) on each of the run's files, after fdatasync",
                "verified_with": f"mincore on up to {RESIDENT_SAMPLE} files before each read phase",
                "files_evicted": 0,
                "max_resident_before": None,
            },
        )
        ev["files_evicted"] += files
        if resident is not None:
            ev["max_resident_before"] = max(resident, ev["max_resident_before"] or 0.0)

    def _check_direct(self, environment: dict[str, Any]) -> None:
        if not self.posix:
            self.honesty["direct"] = {
                "requested": False,
                "effective": False,
                "reason": "not applicable to S3",
            }
            return
        if environment.get("memory_backed"):
            fs = (environment.get("filesystem") or {}).get("fs_type")
            self._warn_once(f"the target is memory-backed ({fs}): numbers measure RAM, not storage")
        if not self.spec.direct:
            self.honesty["direct"] = {"requested": False, "effective": False, "reason": "--no-direct"}
            return
        probe = self.scratch.full(".direct-probe")
        self.scratch.extra_files.append(".direct-probe")
        ok, why = probe_direct(probe)
        self.honesty["direct"] = {"requested": True, "effective": ok, "reason": why or None}
        if not ok:
            self._warn_once(f"direct: false ({why}); buffered I/O is measured")

    def _small_file_timer(self, environment: dict[str, Any]) -> None:
        """Build the C timer once here, so workers only load it; say when Python times instead."""
        if not (self.posix and "meta" in self.spec.patterns):
            return
        ops, why_not = native.load()
        environment["small_file_timer"] = {"timer": "c" if ops else "python", "reason": why_not or None}
        if ops is None:
            self._warn_once(native.python_timing_note(why_not))

    def _ram_check(self, environment: dict[str, Any]) -> None:
        direct = self.honesty.get("direct", {}).get("effective", False)
        data = {"shards", "tokens"} & set(self.spec.patterns)
        ram = int(environment.get("ram_bytes") or 0)
        if self.posix and data and not direct and ram and self.spec.size < RAM_FACTOR * ram:
            self._warn_once(
                f"buffered I/O on a {format_bytes(self.spec.size)} data set with {format_bytes(ram)} of RAM: "
                f"the page cache can hold it; use --size >= {format_bytes(RAM_FACTOR * ram)} for honest reads"
            )

    def _cpu_check(self, point: PointPlan, phase: str, results: list[PhaseResult]) -> None:
        """Collect phases whose busiest worker was CPU-bound; reported as one warning at the end."""
        worst = max(results, key=lambda r: r.cpu["max_worker_pct_of_core"])
        if worst.cpu["max_worker_pct_of_core"] >= CPU_BOUND_PCT:
            python = worst.cpu["max_worker_user_pct_of_core"] >= PYTHON_BOUND_PCT
            self.cpu_bound.append((f"{point.pattern} {point.label} {phase}", python))

    def _cpu_warning(self) -> None:
        python = [name for name, py in self.cpu_bound if py]
        kernel = [name for name, py in self.cpu_bound if not py]
        if python:
            self.warnings.append(
                f"{len(python)} phase(s) had a worker near 100% of a core, mostly in user space "
                f"(Python): the benchmark may be the ceiling there, not the storage; add workers to "
                f"check ({python[0]}, ...)"
            )
        if kernel:
            self.warnings.append(
                f"{len(kernel)} phase(s) had a worker near 100% of a core, mostly in the kernel: the "
                f"filesystem's CPU cost per operation limits them; add workers to see if it scales "
                f"({kernel[0]}, ...)"
            )

    def _throttle_check(self, point: PointPlan, phase: str, results: list[PhaseResult]) -> None:
        """A phase whose last seconds run far slower than its first: throttling, or a cache running out."""
        for r in results:
            full = [row["bytes_per_s"] for row in r.series[:-1]]  # the last bucket is partial
            if r.worker_results:
                # only while every worker runs: once the first is done, fewer workers move less, and
                # that ramp-down at the end of every phase is not a fall in throughput
                active_s = (min(w.end_ns for w in r.worker_results) - r.first_start_ns) / 1e9
                full = full[: max(int(active_s / r.series_bucket_s), 0)]
            while full and full[-1] == 0:
                # a write phase ends in fsync and close, which move no new bytes: buckets of 0 B/s at
                # its end are that flush, not a fall in throughput (a throttled device still moves some)
                full.pop()
            if len(full) >= THROTTLE_MIN_BUCKETS and max(full[:2]) > 0:
                start, end = max(full[:2]), min(full[-2:])
                if end < THROTTLE_DROP * start:
                    self.warnings.append(
                        f"{point.pattern} {point.label} {phase}: throughput fell from {start / 1e6:.0f} to "
                        f"{end / 1e6:.0f} MB/s within the phase (throttling, or a write cache filling up); "
                        "see the time series"
                    )
                    return

    def _delayed_ack_check(self, phases: list[dict[str, Any]]) -> None:
        """Small GETs ~40 ms while HEADs are fast: the gateway waits for a delayed ACK (Nagle)."""
        p50 = {ph["phase"]: ph["summary"]["latency"]["p50_ms"] for ph in phases}
        get, head = p50.get("get"), p50.get("head")
        if get and head and get >= DELAYED_ACK_MS and head * 3 < get and not self.delayed_ack_seen:
            self.delayed_ack_seen = True
            self.warnings.append(
                f"small-object GETs take {get:.0f} ms (p50) while HEADs take {head:.1f} ms: the gateway "
                "waits for TCP delayed ACKs (Nagle); on Ceph RGW set tcp_nodelay=1 in rgw_frontends"
            )

    def _warn_once(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)


def probe_direct(path: str) -> tuple[bool, str]:
    """Can we open and write with O_DIRECT here? (EINVAL means the filesystem refuses it.)"""
    from storekit.bench.engine_posix import O_DIRECT
    from storekit.bench.iobuf import IOBuffer

    if not O_DIRECT:
        return False, "O_DIRECT is not available on this platform"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    os.close(fd)
    try:
        fd = os.open(path, os.O_WRONLY | O_DIRECT | os.O_CLOEXEC)
    except OSError as exc:
        return False, f"filesystem refused O_DIRECT ({exc.strerror})"
    buf = IOBuffer(4096, 0)
    try:
        os.pwrite(fd, buf.view, 0)
    except OSError as exc:
        return False, f"filesystem refused an O_DIRECT write ({exc.strerror})"
    finally:
        os.close(fd)
        buf.close()
        os.unlink(path)
    return True, ""


def summarize(results: list[PhaseResult]) -> dict[str, Any]:
    """Median and spread over repeats; latency percentiles from the histogram merged over repeats."""
    merged = LatencyHistogram()
    for r in results:
        merged.merge(r.latency)
    return {
        "repeats": len(results),
        "bandwidth_bytes_per_s": median_spread([r.bandwidth for r in results]),
        "ops_per_s": median_spread([r.ops_per_s for r in results]),
        "stonewall_bandwidth_bytes_per_s": median_spread(
            [r.stonewall["bandwidth_bytes_per_s"] for r in results if r.stonewall["bandwidth_bytes_per_s"]]
        ),
        "stonewall_ops_per_s": median_spread(
            [r.stonewall["ops_per_s"] for r in results if r.stonewall["ops_per_s"]]
        ),
        "elapsed_s": median_spread([r.elapsed_s for r in results]),
        "latency": merged.summary_ms(),
        "cpu_cores_used": median_spread([r.cpu["cores_used"] for r in results]),
        "max_worker_pct_of_core": max(r.cpu["max_worker_pct_of_core"] for r in results),
        "max_worker_user_pct_of_core": max(r.cpu["max_worker_user_pct_of_core"] for r in results),
        "stragglers": sum(1 for r in results for row in r.stragglers if row["straggler"]),
        "direct": results[0].direct if all(r.direct == results[0].direct for r in results) else False,
        "engine": results[0].engine,
    }


def now_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid() % 100000:05d}-{os.urandom(2).hex()}"
