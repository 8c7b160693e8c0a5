"""Slurm's view on top of the records: which tasks an element is running, pending on, or lost.

The records decide first (a completion record is done, a failure record is failed); Slurm only
refines tasks the records leave open: `squeue` says which elements run or wait (and why), and
`scontrol show job` says how an element that left the queue ended (FAILED, TIMEOUT, OUT_OF_MEMORY,
NODE_FAIL...), naming its log. A task resubmitted by `jobs rerun` is judged by its newest array
only (the old array's failures are history), and a pending element's tasks count under Slurm's
reason (JobArrayTaskLimit, Resources, ...). `sacct` is never asked. Without a reachable controller
the records' view stands and the reason is reported.
"""

from __future__ import annotations

from typing import Any

from storekit.errors import UnreachableError
from storekit.jobdir import Submission
from storekit.jobs.status import JobStatus
from storekit.slurm import commands
from storekit.slurm.submit import EXECUTOR

ENDED_BADLY = {"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "CANCELLED", "PREEMPTED", "BOOT_FAIL",
               "DEADLINE"}  # fmt: skip
ACTIVE = {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STAGE_OUT"}


def slurm_submissions(subs: list[Submission], role: str) -> list[Submission]:
    return [s for s in subs if s.executor == EXECUTOR and s.extra.get("role") == role]


def refine(st: JobStatus) -> dict[str, Any]:
    """Move open tasks of `st` to running/failed by Slurm's view; returns that view for --json."""
    arrays = slurm_submissions(st.submissions, "array")
    finals = slurm_submissions(st.submissions, "finalize")
    if not arrays:
        return {}
    try:
        rows = commands.queued([s.job_id for s in arrays + finals])
    except UnreachableError as exc:
        return {"error": exc.message}
    latest: dict[int, str] = {}  # task -> the newest array that runs it (a rerun supersedes)
    submitted: dict[str, float] = {sub.job_id: sub.submitted or 0.0 for sub in arrays}
    for sub in arrays:
        for element in range(len(sub.batches or [])):
            for task in _tasks(sub.batches or [], element):
                latest[task] = sub.job_id
    for task in list(st.states["failed"]):  # failed before a rerun resubmitted it: open again
        record = st.failures.get(task) or {}
        if task in latest and submitted[latest[task]] > float(record.get("time") or 0):
            _move(st, task, "pending")
            st.failures.pop(task, None)
    open_tasks = set(st.states["pending"])
    moved_running: dict[int, str] = {}
    moved_failed: dict[int, dict[str, Any]] = {}
    waiting: dict[str, int] = {}  # Slurm's reason -> open tasks of elements pending for it
    for sub in arrays:
        batches = sub.batches or []
        mine = {t for t in open_tasks if latest.get(t, sub.job_id) == sub.job_id}
        listed = {
            r.array_index: r for r in rows if r.array_job_id == sub.job_id and r.array_index is not None
        }
        for element, row in listed.items():
            for task in _tasks(batches, element):
                if task in mine and row.state in ACTIVE:
                    moved_running[task] = f"Slurm job {row.job_id} on {row.reason}"
                elif task in mine and row.state == "PENDING":
                    reason = row.reason.strip("()")  # squeue's %R: "(JobArrayTaskLimit)"
                    waiting[reason] = waiting.get(reason, 0) + 1
        lost = [e for e in range(len(batches)) if e not in listed and mine & set(_tasks(batches, e))]
        if lost:
            _ended(sub, lost, batches, mine, moved_failed)
    for task, by in moved_running.items():
        _move(st, task, "running")
        st.running[task] = by
    for task, record in moved_failed.items():
        _move(st, task, "failed")
        st.failures[task] = record
    return {"finalize": [_finalize_state(f, rows) for f in finals], "pending_reasons": waiting}


def _tasks(batches: list[list[int]], element: int) -> list[int]:
    return list(batches[element]) if element < len(batches) else [element]


def _ended(
    sub: Submission,
    elements: list[int],
    batches: list[list[int]],
    open_tasks: set[int],
    failed: dict[int, dict[str, Any]],
) -> None:
    """Elements gone from the queue with tasks left open: how did they end (scontrol, while it knows)?"""
    for record in commands.show_jobs(sub.job_id):
        index = record.get("ArrayTaskId", "")
        state = record.get("JobState", "")
        if not index.isdigit() or int(index) not in elements or state not in ENDED_BADLY:
            continue
        code = record.get("ExitCode", "0:0").split(":")[0]
        for task in _tasks(batches, int(index)):
            if task in open_tasks:
                failed[task] = {
                    "task": task,
                    "error": f"Slurm job {record.get('JobId')} ended {state} ({record.get('Reason', '?')}) "
                    "before the task finished",
                    "exit_code": int(code) if code.isdigit() else None,
                    "host": record.get("NodeList"),
                    "log": record.get("StdOut"),
                }


def _move(st: JobStatus, task: int, to: str) -> None:
    for tasks in st.states.values():
        if task in tasks:
            tasks.remove(task)
    st.states[to] = sorted([*st.states[to], task])


def _finalize_state(sub: Submission, rows: list[commands.QueuedJob]) -> dict[str, Any]:
    row = next((r for r in rows if r.job_id == sub.job_id), None)
    if row is not None:
        return {"job_id": sub.job_id, "state": row.state, "reason": row.reason}
    records = commands.show_jobs(sub.job_id)
    state = records[0].get("JobState", "UNKNOWN") if records else "UNKNOWN"
    return {"job_id": sub.job_id, "state": state, "reason": records[0].get("Reason", "") if records else ""}
