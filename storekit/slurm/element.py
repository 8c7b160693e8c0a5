"""How an array element behaves inside Slurm: its CPUs, and stopping for preemption.

Workers follow `$SLURM_CPUS_PER_TASK` (what the element was given), not the node's CPU count: with
`task/none` or a loose cgroup the process could see every core of a shared node. On USR1 (the
`--signal=B:USR1@90` notice before the time limit) or TERM (preemption) the element stops claiming
tasks, discards the one in flight (finished tasks keep their completion records), asks Slurm to
requeue it and exits 0, so the finalize job's `afterok` still holds and the requeued element skips
what is done.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping

from storekit.errors import Interrupted, StorekitError
from storekit.executors.base import default_workers
from storekit.interrupts import interrupt_on
from storekit.liveness import process_start
from storekit.slurm import commands

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)


def element_workers(env: Mapping[str, str] | None = None) -> int:
    value = (os.environ if env is None else env).get("SLURM_CPUS_PER_TASK", "")
    return int(value) if value.isdigit() and int(value) > 0 else default_workers()


def process_age() -> float | None:
    """Seconds since this process started (exec), from /proc: what start-up cost, imports included."""
    start_ticks = process_start(os.getpid())
    try:
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    if start_ticks is None:
        return None
    return max(0.0, uptime - int(start_ticks) / os.sysconf("SC_CLK_TCK"))


def stop_on_preemption() -> None:
    """USR1/TERM stop the element like Ctrl-C (KeyboardInterrupt in the main thread)."""
    interrupt_on(*STOP_SIGNALS)


def ignore_stop_signals() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def own_job_id(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID", "")
    if not job.isdigit():
        raise StorekitError("not inside a Slurm job (no SLURM_JOB_ID): cannot requeue")
    return job


def requeue_self(env: Mapping[str, str] | None = None) -> str:
    """Ask Slurm to requeue this element; further stop signals are ignored while it exits."""
    ignore_stop_signals()  # Slurm signals the job again as it requeues it
    job = own_job_id(env)
    try:
        commands.requeue(job)
    except StorekitError as exc:
        raise Interrupted(
            f"stopped by a signal and could not requeue job {job} ({exc.message}); finished tasks are kept",
            hint="resubmit the missing tasks with `storekit jobs rerun`",
        ) from None
    return job
