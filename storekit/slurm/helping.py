"""An element that has finished its own tasks helps with the others' before it finalizes.

Elements own fixed slices of the plan, so without this the first to finish idles while the last
still works through its slice (a local run's workers share one queue instead). A helper lists the
work dir and runs tasks that are neither done nor in flight, highest first: owners go in ascending
order, so the two meet in the middle and rarely collide. No claims or locks (array tasks never take
any): a collision only runs one task twice, and the first completion record wins (the output is
deterministic, so either copy is the same). Owners skip a task that a helper completed while they
were busy (LocalExecutor's `skip`, one stat right before each task starts).

Tasks with a failure record are left to their owner or `jobs rerun`: a task that failed here will
fail again, and a helper re-running it would only replace the record naming the owner's log. A task
that fails in a helper's hands (its owner had not run it yet) is handed back: its record names the
owning element and that element's log, the helper stops helping and ends as its own tasks did (exit
0), and the owner, when Slurm starts it, runs the task and fails with it in its own log: one bad
input fails one element, not every element that tried to help.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from storekit import faults
from storekit.errors import Interrupted
from storekit.executors.base import Job
from storekit.executors.local import LocalExecutor
from storekit.jobdir import JobDir


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
    owner: Callable[[int], tuple[str, str | None]] = lambda task: ("?", None),
) -> tuple[int, int]:
    """Run rounds of `workers` free tasks until a scan finds none; (run, skipped as done by then).
    `owner(task)` is (element, its log). Raises Interrupted; a task's failure is handed back to its
    owner (see above) and ends the helping."""
    total = work.header().tasks
    ran = skipped = 0
    while True:
        faults.point("slurm.element-helping")
        round_ = free_tasks(work, total, max(1, workers))
        if not round_:
            return ran, skipped
        say(f"element {name}: helping with tasks {', '.join(map(str, round_))}")
        try:
            report = executor.run(
                job,
                round_,
                workers=workers,
                progress=lambda d, t, b: None,
                on_done=on_done,
                skip=work.is_done,
            )
        except (Interrupted, KeyboardInterrupt):
            raise
        except Exception:
            failed = hand_back(work, round_, owner, name)
            if not failed:
                raise  # not a task's failure (the work dir gone, the helper's own trouble)
            say(
                f"element {name}: task {', '.join(map(str, failed))} failed while helping; left to "
                f"{', '.join(owner(t)[0] for t in failed)} (its record names that element's log)"
            )
            return ran, skipped
        ran += report.tasks_run
        skipped += report.tasks_skipped


def hand_back(
    work: JobDir, tasks: list[int], owner: Callable[[int], tuple[str, str | None]], name: str
) -> list[int]:
    """Rewrite the failure records this helper left for `tasks` to name each task's owner."""
    failed = []
    for task in tasks:
        doc = work.read_failure(task)
        if doc is None or work.is_done(task):
            continue
        failed.append(task)
        element, log = owner(task)
        extra = {k: v for k, v in doc.items() if k not in ("task", "error", "exit_code", "log")}
        extra.update(element=element, helper=name)
        work.record_failure(task, doc["error"], exit_code=int(doc["exit_code"]), log=log, extra=extra)
    return failed
