"""`storekit jobs run-element WORKDIR`: what one array element does, for any job kind.

It reads which plan tasks it owns from the submission in jobs.json (by `$SLURM_ARRAY_JOB_ID` and
`$SLURM_ARRAY_TASK_ID`), skips those with a completion record (a requeued element resumes), and runs
the rest on the local executor with `$SLURM_CPUS_PER_TASK` workers, naming its Slurm log in failure
records. It takes no lock: tasks only add their own records. On USR1 it requeues itself and exits
0 (with --slurm-no-requeue it only stops); on TERM (scancel, preemption, the time limit) it stops
and leaves the rest to Slurm (see element.py). An element that starts after the job was
finalized (more elements than run at once: the others did its tasks) has nothing to do and exits 0
saying so. Once its own tasks are done it helps with other elements' unstarted tasks (see
helping.py). The element that sees every task of the plan done finalizes the job itself, the
finalize job being the fallback (see inline.py).
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from storekit import faults
from storekit.errors import Interrupted, NotFoundError, StorekitError
from storekit.executors.base import load_job, on_node
from storekit.executors.local import LocalExecutor
from storekit.jobdir import JobDir
from storekit.slurm.element import (
    element_workers,
    ignore_stop_signals,
    process_age,
    requeue_self,
    requeue_wanted,
    stop_on_signals,
)
from storekit.slurm.helping import help_others
from storekit.slurm.inline import finalize_inline
from storekit.slurm.submit import element_tasks

# a helper ran the same task (a collision), another element saw every task done and finalized, which
# removed the work dir: this element's copy has nowhere to go and nothing is left to do
FINISHED_ELSEWHERE = "the work dir is gone: every task was done and another element finalized the job"

# the element started after every task was done elsewhere (an element that ran once the others had
# done its tasks, or a requeue after the job was published)
LATE = "the work dir is gone: the other elements did every task and the job was finalized"


@dataclass(frozen=True)
class ElementResult:
    element: str  # "ARRAYID_INDEX"
    tasks: list[int]
    ran: int
    skipped: int  # already done before this element started (a requeue, a rerun)
    requeued: bool = False
    done_by_others: int = 0  # own tasks a helper completed first: found done right before starting
    helped: int = 0  # other elements' tasks this one ran once its own were done
    finalized: dict[str, Any] | None = None  # what finalize returned, when this element ran it
    late: bool = False  # started after the job was finalized: nothing to do

    def summary(self) -> str:
        if self.late:
            return f"element {self.element}: nothing to do: {LATE}"
        state = "requeued" if self.requeued else "done"
        return (
            f"element {self.element}: {state}, {self.ran} tasks run, {self.skipped} already done, "
            f"{self.done_by_others} done by helpers, {self.helped} run helping others"
        )


def element_identity(env: Mapping[str, str]) -> tuple[str, int]:
    array, index = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
    if not (array.isdigit() and index.isdigit()):
        raise StorekitError(
            "jobs run-element runs inside a Slurm array job (no SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID)",
            hint="it is started by the sbatch script storekit writes; run the command itself for a local run",
        )
    return array, int(index)


def element_log(env: Mapping[str, str], work: JobDir, array: str, index: int) -> str | None:
    """The element's log file as the sbatch script names it (%A_%a.out in the submission's log dir)."""
    for sub in work.submissions():
        if sub.job_id == array and sub.extra.get("log_dir"):
            return str(Path(sub.extra["log_dir"]) / f"{array}_{index}.out")
    return None


def task_owners(work: JobDir, array: str) -> Callable[[int], tuple[str, str | None]]:
    """task -> (the element of `array` that owns it, that element's log)."""
    sub = next((s for s in work.submissions() if s.job_id == array), None)
    batches = (sub.batches if sub is not None else None) or []
    by_task = {t: i for i, batch in enumerate(batches) for t in batch}
    log_dir = sub.extra.get("log_dir") if sub is not None else None

    def owner(task: int) -> tuple[str, str | None]:
        index = by_task.get(task, task)  # no batches recorded: element i runs task i
        return f"{array}_{index}", str(Path(log_dir) / f"{array}_{index}.out") if log_dir else None

    return owner


def run_element(
    work_path: Path,
    site: Any,
    *,
    env: Mapping[str, str] | None = None,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> ElementResult:
    env = os.environ if env is None else env
    stop_on_signals()
    work = JobDir(work_path)
    array, index = element_identity(env)
    name = f"{array}_{index}"
    try:
        if not work_path.is_dir():
            raise NotFoundError(f"{work_path}: no such work dir")
        tasks = element_tasks(work, array, index, say=say)
        requeue_ok = requeue_allowed(work, array)
        job = on_node(load_job(work_path, site))  # what its kind checks on a node (kinds.py)
        work.remove_dead_temps()  # a SIGKILLed run's on this node (a requeue after a kill, say)
        scan = work.scan()
    except (StorekitError, OSError):
        if work_path.exists():
            raise
        return ElementResult(name, [], 0, 0, late=True)  # its summary is the one line it prints
    todo = [t for t in tasks if t not in scan.done]
    workers = element_workers(env)
    node = env.get("SLURMD_NODENAME", "?")
    age = process_age()
    ready = f" (ready {age:.2f} s after start: Python, imports, plan, tokenizer)" if age is not None else ""
    say(f"element {name}: {len(todo)} of {len(tasks)} tasks to run, {workers} workers, on {node}{ready}")
    started = time.monotonic()
    if not gc.isenabled():  # element_entry turned it off for start-up
        gc.freeze()  # start-up's objects (modules, plan) are for good: the tasks' collections skip them
        gc.enable()
    executor = LocalExecutor(log=element_log(env, work, array, index), own_temps_only=True)
    ran = [0]

    def counted(task: int, record: dict[str, Any]) -> None:
        ran[0] += 1
        if task in scan.failed:
            work.clear_failure(task)  # an earlier attempt's failure: this one succeeded
        say(f"element {name}: task {task} done")
        faults.point("slurm.element-task-done")

    def helped(task: int, record: dict[str, Any]) -> None:
        say(f"element {name}: task {task} done (helping)")

    def needless(task: int) -> bool:  # one stat before each task: a helper did it, or all is over
        return work.is_done(task) or not work.tasks.is_dir()

    try:
        report = executor.run(
            job, todo, workers=workers, progress=lambda d, t, b: None, on_done=counted, skip=needless
        )
        say(f"element {name}: {ran[0]} tasks run in {time.monotonic() - started:.2f} s")
    except (Interrupted, KeyboardInterrupt):
        if set(tasks) <= work.done_tasks():  # the signal came after its last task: nothing to redo
            ignore_stop_signals()
            say(f"element {name}: stopped by a signal after its last task; the finalize job finalizes")
            return ElementResult(name, tasks, ran[0], len(tasks) - len(todo))
        if not requeue_wanted():  # TERM: Slurm cancels, preempts or times it out; it decides what next
            ignore_stop_signals()
            raise Interrupted(
                f"element {name}: stopped by SIGTERM after {ran[0]} tasks (scancel, preemption or the "
                "time limit); finished tasks are kept",
                hint="Slurm requeues a preempted element; after a scancel or TIMEOUT, `storekit jobs rerun`",
            ) from None
        if not requeue_ok:  # USR1 by hand (its script asks for no notice): Slurm would refuse
            ignore_stop_signals()
            raise Interrupted(
                f"element {name}: stopped by SIGUSR1 after {ran[0]} tasks and not requeued: the array "
                "was submitted with --slurm-no-requeue; finished tasks are kept",
                hint="`storekit jobs rerun` resubmits the rest",
            ) from None
        if not ran[0] and env.get("SLURM_RESTART_COUNT", "0") not in ("", "0"):
            ignore_stop_signals()  # requeued before and again no task done: it would never finish
            raise Interrupted(
                f"element {name}: the time-limit notice came again before any task finished; not requeued",
                hint="give the elements more time: `storekit jobs rerun TARGET --slurm-time LONGER`",
            ) from None
        requeued = requeue_self(env)
        say(f"element {name}: stopped by a signal after {ran[0]} tasks; requeued job {requeued}")
        return ElementResult(name, tasks, ran[0], len(tasks) - len(todo), requeued=True)
    except (StorekitError, OSError):  # a task's step meeting the removed work dir may be a bare OSError
        if not _finished_elsewhere(work, say, name):
            raise
        return ElementResult(name, tasks, ran[0], len(tasks) - len(todo))
    result = ElementResult(name, tasks, ran[0], len(tasks) - len(todo), done_by_others=report.tasks_skipped)
    try:  # its own tasks are done: a stop from here on needs no requeue (nothing of its own is left)
        helping_started = time.monotonic()
        owners = task_owners(work, array)
        run, _ = help_others(work, job, executor, workers, helped, say, name, owners)
        result = replace(result, helped=run)
        if run:
            say(f"element {name}: helped with {run} tasks in {time.monotonic() - helping_started:.2f} s")
    except (Interrupted, KeyboardInterrupt):
        ignore_stop_signals()  # exit 0: the owners still have the tasks it was helping with
        say(f"element {name}: stopped by a signal while helping, after its last task; finalize job finalizes")
        return result
    except (StorekitError, OSError):  # the job finalized by another element while this one helped
        if not _finished_elsewhere(work, say, name):
            raise
        return result
    if not _finalizes(work, array):
        return result
    return replace(result, finalized=finalize_inline(work, job, array, name, say))


def requeue_allowed(work: JobDir, array: str) -> bool:
    """False for an array submitted with --slurm-no-requeue (`scontrol requeue` would be refused)."""
    sub = next((s for s in work.submissions() if s.job_id == array), None)
    options = sub.extra.get("options") if sub is not None else None
    return not isinstance(options, dict) or options.get("requeue", True) is not False


def _finalizes(work: JobDir, array: str) -> bool:
    """False for an array submitted without a finalize step (SlurmExecutor.run: its caller does)."""
    sub = next((s for s in work.submissions() if s.job_id == array), None)
    return sub is None or sub.extra.get("finalize", True) is not False


def _finished_elsewhere(work: JobDir, say: Callable[[str], None], name: str) -> bool:
    """After an error: True (and said) when the work dir is gone, i.e. the job was finalized."""
    if work.path.exists():
        return False
    say(f"element {name}: {FINISHED_ELSEWHERE}")
    return True
