"""Run one phase: a fresh process per worker, all released together by a barrier.

Fresh processes per phase mean no worker can read back what it wrote through its own page cache,
and the GIL of one worker never slows another. Processes come from a forkserver (cheap to start, and
not a fork of a parent that runs progress-bar threads). A worker that fails aborts the barrier so
nobody waits forever; Ctrl-C or SIGTERM stops every worker before the caller cleans up.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import multiprocessing as mp
import os
import queue
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from storekit import faults
from storekit.bench.plan import PhasePlan, WorkerTask
from storekit.bench.results import WorkerResult
from storekit.bench.worker import StartBarrier, run_worker
from storekit.errors import NoSpaceError, StorekitError, UnreachableError, error_class, storage_error

if TYPE_CHECKING:
    from storekit.bench.plan import BenchPlan
    from storekit.bench.scratch import PosixScratch, S3Scratch
    from storekit.bench.spec import BenchSpec

# imported once by the forkserver, so each worker process starts in milliseconds
PRELOAD = {
    "posix": ["storekit.bench.worker", "storekit.bench.engine_posix", "numpy"],
    "s3": ["storekit.bench.worker", "storekit.bench.engine_s3_warm", "numpy"],
}
STOP_GRACE_S = 5.0
Outcomes = dict[int, tuple[str, Any]]  # worker -> (status, payload) as the worker reported it
PR_SET_PDEATHSIG = 1  # linux/prctl.h
WATCH_POLL_S = 1.0


class WorkerFailed(StorekitError):
    """A worker hit an I/O error; the message names the worker and the file or key."""


def _die_with_coordinator(coordinator: int) -> None:
    """A worker must not outlive the process that started it (the coordinator, or a node's agent):
    a SIGKILLed one leaves nobody to stop it, so it would wait at the start barrier for 10 minutes
    or write into a run directory that a later run reclaims. PR_SET_PDEATHSIG alone is not enough:
    our parent is the forkserver, which stays up while any worker holds its "alive" pipe (all do).
    So a thread watches the coordinator itself and ends this process when it is gone."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        pidfd = os.pidfd_open(coordinator)
    except ProcessLookupError:
        os._exit(1)  # gone before we could watch it
    except (OSError, AttributeError):  # no pidfd (Linux < 5.3): look every second instead
        pidfd = -1
    threading.Thread(target=_exit_when_gone, args=(coordinator, pidfd), daemon=True,
                     name="bench-watch-coordinator").start()  # fmt: skip


def _exit_when_gone(coordinator: int, pidfd: int) -> None:
    if pidfd >= 0:
        watch = select.poll()
        watch.register(pidfd, select.POLLIN)
        while not watch.poll():  # readable once the process has exited
            pass
    else:
        try:
            while True:
                os.kill(coordinator, 0)
                time.sleep(WATCH_POLL_S)
        except ProcessLookupError:
            pass
        except PermissionError:
            return  # not a process we may signal: nothing to watch
    os._exit(1)


def worker_process_main(task: WorkerTask, barrier: StartBarrier, results: Any, coordinator: int) -> None:
    """One worker process's body (here and in a multi-node agent): run its task, put the outcome on
    `results`, and die with the process that started it."""
    _die_with_coordinator(coordinator)
    # The coordinator owns Ctrl-C: it stops workers with SIGTERM and then cleans up.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        results.put((task.worker, "ok", run_worker(task, barrier)))
    except threading.BrokenBarrierError:
        results.put((task.worker, "aborted", "start barrier broken"))
    except BaseException as exc:
        with contextlib.suppress(Exception):
            barrier.abort()  # type: ignore[attr-defined]
        # classified here, where the exception still has its errno and cause: pickling loses them
        results.put((task.worker, "error", (error_class(exc), _worker_message(exc))))


def _worker_message(exc: BaseException) -> str:
    """The worker's failure in one line; a full quota (EDQUOT) names the area and its limit, asked of
    the file system here, in the worker, where the exception still has its errno."""
    text = f"{exc}" or type(exc).__name__
    if isinstance(exc, OSError) and exc.errno == errno.EDQUOT:
        where = str(exc.filename) if exc.filename else text.removesuffix(f": {os.strerror(errno.EDQUOT)}")
        err = storage_error(exc, where)
        if err is not None:
            return str(err)
    return text


class PhaseRunner:
    """`local`'s runner of bench io's phases: workers on this machine. Registered by executor name
    in storekit.executors.base, as `slurm`'s is (bench/cluster/runner.py); the CLI uses either
    the same way: `settings` (the launch options it takes: none), `check`, `dry_run_fields`,
    `run_suite`."""

    launch_options: ClassVar[dict[str, str]] = {}  # --nodes, --slurm-*: not here
    nodes = 1

    def __init__(self, kind: str = "posix") -> None:
        self.ctx = mp.get_context("forkserver")
        with contextlib.suppress(ValueError):
            self.ctx.set_forkserver_preload(PRELOAD[kind])

    @classmethod
    def settings(cls, given: dict[str, Any]) -> dict[str, Any]:
        return {}

    def check(self, spec: BenchSpec) -> None:
        """Nothing to refuse before the run: the target's own checks come first."""

    def dry_run_fields(self) -> dict[str, Any]:
        return {}

    def run_suite(
        self,
        plan: BenchPlan,
        scratch: PosixScratch | S3Scratch,
        *,
        progress: Callable[[int, int], None],
        warn: Callable[[str], None],
        info: Callable[[str], None],
        document: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> dict[str, Any]:
        """The suite on this machine's workers; the document `document(run)` makes of it."""
        from storekit.bench.suite import Suite  # the suite's checks and reports load with the run

        return document(Suite(plan, scratch, progress=progress, warn=warn, runner=self).run())

    def run(self, phase: PhasePlan, repeat: int) -> list[WorkerResult]:
        tasks = [replace(t, seed=t.seed + 7919 * repeat) for t in phase.tasks]
        barrier = self.ctx.Barrier(len(tasks))
        results = self.ctx.Queue()
        procs = [
            self.ctx.Process(
                target=worker_process_main, args=(t, barrier, results, os.getpid()), name=f"bench-w{t.worker}"
            )
            for t in tasks
        ]
        outcomes = run_processes(
            procs,
            barrier,
            started=lambda: faults.point(f"bench.{phase.op}.started"),  # the workers of this phase exist
            collect=lambda: self._collect(procs, results, len(tasks)),
        )
        return [WorkerResult.from_dict(msg) for msg in phase_results(outcomes, phase.name)]

    def _collect(self, procs: list[Any], results: Any, expected: int) -> dict[int, tuple[str, Any]]:
        """Wait for every worker's message; a worker that dies silently fails the phase."""
        outcomes: dict[int, tuple[str, Any]] = {}
        while len(outcomes) < expected:
            try:
                worker, status, payload = results.get(timeout=0.2)
                outcomes[worker] = (status, payload)
                continue
            except queue.Empty:
                pass
            dead = [p for p in procs if p.exitcode is not None and p.exitcode != 0]
            if dead:
                try:  # its last words may still be in the pipe
                    worker, status, payload = results.get(timeout=1.0)
                    outcomes[worker] = (status, payload)
                    continue
                except queue.Empty:
                    p = dead[0]
                    raise WorkerFailed(f"worker process {p.name} died (exit code {p.exitcode})") from None
        return outcomes


def phase_results(outcomes: Outcomes, phase: str) -> list[Any]:
    """The workers' results in worker order; else the phase's failure: the first worker error, as
    no space (exit 6) or unreachable (exit 5) where it was one of those, WorkerFailed otherwise."""
    errors = [msg for status, msg in outcomes.values() if status == "error"]
    if errors:
        cls, message = errors[0]
        if cls is NoSpaceError:
            raise NoSpaceError(
                f"{phase} phase ran out of space: {message}", hint="lower --size or free space"
            )
        if cls is UnreachableError:
            raise UnreachableError(f"{phase} phase failed: {message}", hint="retry later")
        raise WorkerFailed(f"{phase} phase failed: {message}")
    if any(status != "ok" for status, _ in outcomes.values()):
        raise WorkerFailed(f"{phase} phase failed: a worker stopped before finishing")
    return [msg for _, (_, msg) in sorted(outcomes.items())]


def run_processes(
    procs: list[Any], barrier: Any, *, started: Callable[[], None], collect: Callable[[], Outcomes]
) -> Outcomes:
    """Start the worker processes and `collect` their outcomes; if anything fails on the way, the
    start barrier is broken (no worker waits at it) and every worker is stopped before re-raising."""
    try:
        for p in procs:
            p.start()
        started()
        outcomes = collect()
    except BaseException:
        barrier.abort()
        stop_processes(procs)
        raise
    for p in procs:
        p.join()
    return outcomes


def stop_processes(procs: list[Any]) -> None:
    """Ask every live worker process to stop (SIGTERM), wait STOP_GRACE_S in all, then SIGKILL."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()
