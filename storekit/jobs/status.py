"""Where each task of a job stands, from its records alone: done, running, failed or pending.

    done      tasks/NNNNNN exists (renamed into place whole)
    running   a temp dir tasks/.NNNNNN.storekit-tmp-PID-START@HOST.* whose run is alive (this
              host: that pid runs and started at START; another host: assumed, the scheduler's
              view refines it)
    failed    failed/NNNNNN.json and not done (its record names the error, exit code and log)
    pending   none of these (never started, or its run died before finishing)

Costs one listing of tasks/ and of failed/ plus one read per failed task, whatever the job's size.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from storekit.errors import UsageError
from storekit.executors.kinds import hook
from storekit.jobdir import JobDir, JobHeader, Submission

STATES = ("done", "running", "failed", "pending")


@dataclass
class JobStatus:
    path: str
    header: JobHeader
    states: dict[str, list[int]]  # state -> task indexes, ascending
    failures: dict[int, dict[str, Any]] = field(default_factory=dict)  # failed task -> its record
    running: dict[int, str] = field(default_factory=dict)  # running task -> "pid N on HOST"
    submissions: list[Submission] = field(default_factory=list)
    result: dict[str, Any] | None = None  # what its kind shows of a finished job (kinds.py `result`)

    def counts(self) -> dict[str, int]:
        return {s: len(self.states[s]) for s in STATES}

    @property
    def complete(self) -> bool:
        return len(self.states["done"]) == self.header.tasks

    def to_dict(self) -> dict[str, Any]:
        return {
            "work_dir": self.path,
            "kind": self.header.kind,
            "tasks": self.header.tasks,
            "counts": self.counts(),
            "complete": self.complete,
            "states": {s: ranges(self.states[s]) for s in STATES},
            "failed": [self.failures[i] for i in self.states["failed"]],
            "running": [{"task": i, "by": self.running[i]} for i in self.states["running"]],
            "submissions": [s.__dict__ for s in self.submissions],
            **({"result": self.result} if self.result is not None else {}),
        }


def job_status(job: JobDir) -> JobStatus:
    header = job.header()
    scan = job.scan()
    here = socket.gethostname()
    running: dict[int, str] = {}
    for flying in scan.in_flight:
        if flying.index not in scan.done and flying.may_be_alive(here):
            running[flying.index] = f"pid {flying.pid} on {flying.host}"
    states: dict[str, list[int]] = {s: [] for s in STATES}
    failures: dict[int, dict[str, Any]] = {}
    for index in range(header.tasks):
        if index in scan.done:
            states["done"].append(index)
        elif index in running:
            states["running"].append(index)
        elif index in scan.failed and (record := job.read_failure(index)) is not None:
            states["failed"].append(index)
            failures[index] = record
        else:
            states["pending"].append(index)
    result = None
    with contextlib.suppress(UsageError):  # a kind this process does not know: its records stand
        shown = hook(header.kind, "result")
        result = shown(job) if shown is not None else None
    return JobStatus(str(job.path), header, states, failures, running, job.submissions(), result)


def ranges(indexes: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2,5,7-8": per-task states of 10,000 tasks in a few bytes."""
    out: list[str] = []
    start = prev = None
    for i in indexes:
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = i
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(out)


def parse_ranges(text: str) -> list[int]:
    """ "0-2,5" -> [0, 1, 2, 5] (ValueError on anything else); what --task-ids takes."""
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        first, dash, last = item.partition("-")
        lo, hi = int(first), int(last) if dash else int(first)
        if lo < 0 or hi < lo:
            raise ValueError(f"bad task range {item!r}")
        out.extend(range(lo, hi + 1))
    return out
