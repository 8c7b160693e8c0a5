"""`storekit jobs rerun`: resubmit only the failed or missing tasks of a Slurm job, then finalize.

Refused while an element of the job is still queued or running (exit 5), or while every task is
done and a finalize job that can still run is queued or running (it publishes the dataset). A
finalize job queued while tasks are missing, or pending with DependencyNeverSatisfied (clusters
without kill_invalid_depend), can never run and is cancelled. When every task is done but no
finalize job is left (it failed or was cancelled), a lone finalize job is submitted. Failure
records of the resubmitted tasks are removed (the element logs keep the story). Before the
resubmission the job's kind may bring its plan up to date (its `before_resubmit` hook, kinds.py;
prepare records inputs fixed since the plan: storekit/pipeline/resubmit.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from storekit.errors import BusyError, UsageError
from storekit.executors.kinds import hook
from storekit.jobdir import JobDir
from storekit.jobs.status import job_status, ranges
from storekit.slurm import commands
from storekit.slurm.status import refine, slurm_submissions
from storekit.slurm.submit import Submitted, finalize_script, plan_submission, submit, submit_finalize
from storekit.slurmopts import options_from_dict


@dataclass
class RerunOutcome:
    work_dir: str
    tasks: list[int]
    cancelled: list[str] = field(default_factory=list)
    refreshed_sources: list[str] = field(default_factory=list)
    submitted: Submitted | None = None
    lone_finalize_job_id: str | None = None  # every task was done: only a finalize job was submitted

    def to_dict(self) -> dict[str, Any]:
        sub = self.submitted
        return {
            "work_dir": self.work_dir,
            "tasks": ranges(self.tasks),
            "task_count": len(self.tasks),
            "cancelled": self.cancelled,
            "refreshed_sources": self.refreshed_sources,
            "array_job_id": sub.array_job_id if sub else None,
            "finalize_job_id": sub.finalize_job_id if sub else self.lone_finalize_job_id,
            "elements": sub.plan.elements.elements if sub else 0,
        }


def rerun(path: Path, *, dry_run: bool = False, changes: dict[str, Any] | None = None) -> RerunOutcome:
    work = JobDir(path)
    st = job_status(work)
    arrays = slurm_submissions(st.submissions, "array")
    if not arrays and slurm_submissions(st.submissions, "step"):
        raise UsageError(
            f"{path} ran as one Slurm job step (its processes run together): no task is resubmitted",
            hint="run the command that made it again",
        )
    if not arrays:
        raise UsageError(
            f"{path} was not submitted to Slurm", hint="rerun the command that made it (it resumes)"
        )
    refine(st)
    if st.states["running"]:
        raise BusyError(
            f"tasks {ranges(st.states['running'])} of {path} are still running",
            hint="wait for them, or cancel the job with scancel first",
        )
    finals = slurm_submissions(st.submissions, "finalize")
    queued = commands.queued([s.job_id for s in arrays + finals])
    if any(r.array_index is not None for r in queued):
        raise BusyError(
            f"elements of job {queued[0].array_job_id} are still queued", hint="wait, or scancel it"
        )
    todo = sorted(st.states["failed"] + st.states["pending"])
    alive = [r for r in queued if "NeverSatisfied" not in r.reason]
    if not todo and alive:  # the array ended well: its finalize job is about to publish, or is
        raise BusyError(
            f"every task of {path} is done and finalize job {alive[0].job_id} is "
            f"{alive[0].state.lower()} ({alive[0].reason}): it publishes the dataset",
            hint=f"follow it with `storekit jobs status {path}`",
        )
    last = arrays[-1].extra
    outcome = RerunOutcome(work_dir=str(path), tasks=todo)
    stuck = [r.job_id for r in queued]
    # --slurm-time/--slurm-mem/--slurm-partition: retry after TIMEOUT or OUT_OF_MEMORY with more
    given = {k: v for k, v in (changes or {}).items() if v}
    if "mem" in given:
        given["mem_per_cpu"] = None  # the new --slurm-mem replaces the old per-CPU amount
    options = replace(options_from_dict(last["options"]), **given)
    options.check()
    if "partition" in given:
        commands.node_addresses(options.partition)  # an unknown one: exit 2 naming the known ones
    log_dir, extra_args = Path(last["log_dir"]), tuple(last.get("extra_args", ()))
    plan = plan_submission(
        work,
        todo,
        job_name=last["job_name"],
        log_dir=log_dir,
        options=options,
        config=last.get("config"),
    ) if todo else None  # fmt: skip
    if dry_run:
        outcome.cancelled = stuck
        return outcome
    if stuck:
        commands.cancel(stuck)  # a finalize waiting on an array that failed: it can never run
        outcome.cancelled = stuck
    if plan is None:  # every task is done; the finalize job failed or was cancelled
        script = finalize_script(
            work, job_name=last["job_name"], log_dir=log_dir, options=options, config=last.get("config")
        )
        outcome.lone_finalize_job_id = submit_finalize(work, script, log_dir, extra_args=extra_args)
        return outcome
    refresh = hook(work.header().kind, "before_resubmit")  # its kind's (prepare: fixed inputs)
    if refresh is not None:
        outcome.refreshed_sources = refresh(work, set(st.states["done"]))
    for task in todo:
        work.clear_failure(task)
    outcome.submitted = submit(work, plan, extra_args=extra_args)
    return outcome
