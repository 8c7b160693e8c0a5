"""An element that has finished its own tasks helps with the others' before it finalizes.

Elements own fixed slices of the plan, so without this the first to finish idles while the last
still works through its slice (a local run's workers share one queue instead). A helper lists the
work dir and runs tasks that are neither done nor in flight, highest first: owners go in ascending
order, so the two meet in the middle and rarely collide. No claims or locks (array tasks never take
any): a collision only runs one task twice, and the first completion record wins (the output is
deterministic, so either copy is the same). Owners skip a task that a helper completed while they
were busy (LocalExecutor's `skip`, one stat right before each task starts).

Tasks with a failure record are left to their owner or `jobs rerun`: a task that failed here will
fail again, and a helper re-running it would only replace the record naming the owner's log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from storekit import faults
from storekit.executors.base import Job
from storekit.executors.local import LocalExecutor
from storekit.jobs.workdir import JobDir


def free_tasks(work: JobDir, total: int, limit: int) -> list[int]:
    """Up to `limit` tasks nobody has done, failed or started, highest first (one scan)."""
    scan = work.scan()
    busy = scan.done | scan.failed | {f.index for f in scan.in_flight}
    return [t for t in range(total - 1, -1, -1) if t not in busy][:limit]


def help_others(
    work: JobDir,
    job: Job,
    executor: LocalExecutor,
    workers: int,
    on_done: Callable[[int, dict[str, Any]], None],
    say: Callable[[str], None],
    name: str,
) -> tuple[int, int]:
    """Run rounds of `workers` free tasks until a scan finds none; (run, skipped as done by then).
    Raises what LocalExecutor.run raises (the first task's error, Interrupted)."""
    total = work.header().tasks
    ran = skipped = 0
    while True:
        faults.point("slurm.element-helping")
        round_ = free_tasks(work, total, max(1, workers))
        if not round_:
            return ran, skipped
        say(f"element {name}: helping with tasks {', '.join(map(str, round_))}")
        report = executor.run(
            job, round_, workers=workers, progress=lambda d, t, b: None, on_done=on_done, skip=work.is_done
        )
        ran += report.tasks_run
        skipped += report.tasks_skipped
