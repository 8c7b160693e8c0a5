"""A job kind that only this test package knows, registered the way a domain package registers its
own (storekit/pipeline/kinds.py): task i writes `out.bin`, echo's payload of i, and on a scheduler's
node its `on_node` adapter appends "@<the node's name>" to it, so the bytes tell where a task ran
and that the element ran what this kind registered. Work dirs are named "test-stamp-...".

A process that has not imported this module learns the kind through $STOREKIT_JOB_KINDS (an
element of a Slurm array: sbatch passes the submitting environment on).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import astuple
from pathlib import Path
from typing import Any

from storekit.executors.base import DoneFn, Job, ProgressFn, register_kind
from storekit.jobdir import DONE, JobDir, part_digest, remove_path
from tests.unit.jobs.echo_job import payload

KIND = "test-stamp"
PREFIX = "test-stamp-"
MODULE = __name__
register_kind(KIND, f"{MODULE}:load", on_node=f"{MODULE}:on_node", dir_prefixes=(PREFIX,))


def make(path: Path, sizes: list[int]) -> JobDir:
    work = JobDir(path)
    work.create()
    work.write_plan(
        json.dumps({"sizes": sizes}).encode(), kind=KIND, tasks=len(sizes), meta={"output": "stamp"}
    )
    return work


def expected(index: int, size: int, node: str | None) -> bytes:
    return payload(index, size) + (f"@{node}".encode() if node is not None else b"")


class StampJob:
    kind = KIND

    def __init__(self, work: JobDir, node: str | None = None) -> None:
        self.work = work
        self.node = node
        self.sizes: list[int] = json.loads(work.read_plan())["sizes"]

    @property
    def dir(self) -> JobDir:
        return self.work

    def task_cost(self, index: int) -> int:
        return self.sizes[index]

    def setup_process(self) -> None:
        pass

    def threads_per_process(self) -> int:
        return 1

    def runner(self, should_stop: Callable[[], bool]) -> _Runner:
        return _Runner(self)


class _Runner:
    def __init__(self, job: StampJob) -> None:
        self.job = job

    def run(self, index: int, progress: ProgressFn, done: DoneFn) -> dict[str, Any]:
        work = self.job.work
        tmp = work.new_task_dir(index)
        try:
            (tmp / "out.bin").write_bytes(expected(index, self.job.sizes[index], self.job.node))
            record = {"task": index, "parts": {"out.bin": list(astuple(part_digest(tmp / "out.bin")))}}
            (tmp / DONE).write_text(json.dumps(record))
            work.commit_task(tmp, index)
        except BaseException:
            remove_path(tmp)
            raise
        done(index, record)
        return record

    def drain(self) -> None:
        pass


def load(path: Path, site: Any) -> StampJob:
    return StampJob(JobDir(path))


def on_node(job: Job) -> Job:
    assert isinstance(job, StampJob)
    return StampJob(job.work, node=os.environ.get("SLURMD_NODENAME", "?"))
