"""A worker: a pure function of (task, start barrier) returning a plain, mergeable result.

It prepares (opens files, fills aligned buffers, connects), waits on the barrier so every worker starts
together, runs its timed loop and returns `WorkerResult.to_dict()`. Nothing else is shared, so a
launcher can run workers on other nodes with any barrier that has `wait()` and merge the results.
"""

from __future__ import annotations

import os
import resource
import socket
from typing import Any, Protocol

from storekit import faults
from storekit.bench.plan import WorkerTask
from storekit.bench.recorder import Job, Recorder
from storekit.bench.results import WorkerResult

BARRIER_TIMEOUT_S = 600.0


class StartBarrier(Protocol):
    def wait(self, timeout: float | None = None) -> int: ...


def prepare_job(task: WorkerTask) -> Job:
    if task.target.kind == "s3":
        from storekit.bench import engine_s3

        return engine_s3.prepare(task)
    from storekit.bench import engine_posix

    return engine_posix.prepare(task)


def run_worker(task: WorkerTask, barrier: StartBarrier) -> dict[str, Any]:
    """Prepare, start with everyone else, run, and report. Raises on I/O errors."""
    job = prepare_job(task)
    try:
        rec = Recorder()
        faults.point("bench.worker.prepared")  # not timed: before the start barrier
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        start = rec.now()
        job.run(rec)
        end = rec.now()
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        job.close()
    result = WorkerResult(
        worker=task.worker,
        op=task.op,
        host=socket.gethostname(),
        pid=os.getpid(),
        start_ns=start + rec.wall_offset,
        end_ns=end + rec.wall_offset,
        bytes=rec.bytes,
        ops=rec.ops,
        latency=rec.latency,
        trace=rec.trace,
        cpu_user_s=cpu1.ru_utime - cpu0.ru_utime,
        cpu_sys_s=cpu1.ru_stime - cpu0.ru_stime,
        direct=job.direct,
        engine=job.engine,
        notes=job.notes,
        settle_s=float(getattr(job, "settle_s", 0.0)),  # POSIX jobs sync the filesystem first
    )
    return result.to_dict()
