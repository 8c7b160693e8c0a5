"""How an array element behaves inside Slurm: its CPUs, and the signals Slurm sends.

Workers follow `$SLURM_CPUS_PER_TASK` (what the element was given), else the CPUs allocated on the
node, not the node's CPU count: with `task/none` or a loose cgroup the process could see every core
of a shared node.

Signals keep Slurm's meaning. Every way Slurm ends a running job (scancel, preemption, the time
limit, `scontrol requeue`, a node going down) reaches the element as SIGTERM, then SIGKILL after
KillWait, and slurmctld has already decided what follows: CANCELLED (scancel), TIMEOUT, or back to
PENDING (preemption with PreemptMode=REQUEUE, `scontrol requeue`). So on TERM the element only stops:
it discards the task in flight (finished tasks keep their completion records) and exits 130; it never
requeues itself, or a user's scancel would not cancel. USR1 is storekit's own request
(`--signal=B:USR1@90`, 90 s before the time limit): the element stops the same way, asks Slurm to
requeue this one element (`ARRAYID_INDEX`: the bare job id of the element whose id equals the
array's names the whole array) and exits 0, so the finalize job's `afterok` still holds and the
requeued element skips what is done.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Mapping

from storekit.errors import Interrupted, StorekitError
from storekit.executors.base import default_workers
from storekit.liveness import process_start
from storekit.slurm import commands

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
_stopped_by: list[int] = []  # the stop signal that arrived, if any (signal handlers run in main)


def element_workers(env: Mapping[str, str] | None = None) -> int:
    """`$SLURM_CPUS_PER_TASK`, else the CPUs Slurm allocated to the job on this node
    (`$SLURM_CPUS_ON_NODE`), never more than this process may use: with `task/none` the affinity
    mask is the whole node, which would oversubscribe the CPUs other jobs were given."""
    env = os.environ if env is None else env
    for key in ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        value = env.get(key, "")
        if value.isdigit() and int(value) > 0:
            return min(int(value), default_workers())
    return default_workers()


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


def stop_on_signals() -> None:
    """USR1/TERM stop the element like Ctrl-C (KeyboardInterrupt in the main thread); which one
    arrived decides whether it asks for a requeue (`requeue_wanted`)."""
    _stopped_by.clear()  # one element per process; tests run several
    if threading.current_thread() is threading.main_thread():  # elsewhere (tests) main's handlers stand
        for sig in STOP_SIGNALS:
            signal.signal(sig, _note_and_stop)


def _note_and_stop(signum: int, frame: object) -> None:
    _stopped_by.append(signum)
    raise KeyboardInterrupt


def requeue_wanted() -> bool:
    """True when the stop was storekit's time-limit notice (USR1): everything else that stops a
    running element (TERM) comes from Slurm, which has already decided what happens next."""
    return bool(_stopped_by) and _stopped_by[0] == signal.SIGUSR1


def ignore_stop_signals() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def own_job_id(env: Mapping[str, str] | None = None) -> str:
    """This element as Slurm names one array task: ARRAYID_INDEX. `scontrol requeue ARRAYID` (also
    the JobId of one of its elements) would requeue every element of the array."""
    env = os.environ if env is None else env
    array, index = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
    if array.isdigit() and index.isdigit():
        return f"{array}_{index}"
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
