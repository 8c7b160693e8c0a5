"""A small real job kind for the job layer's tests: task i writes `out.bin` (its bytes derive from i)
and a completion record with the part's digest; tasks listed in the plan's "fail" raise InputError.
Finalize concatenates every task's part into `echo.out` beside the work dir, then removes it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import astuple
from pathlib import Path
from typing import Any

from storekit.errors import InputError, StorekitError
from storekit.executors.base import DoneFn, ProgressFn, Stopped, register_kind
from storekit.jobdir import DONE, JobDir, part_digest, remove_path

KIND = "test-echo"
register_kind(KIND, "tests.unit.jobs.echo_job:load")


def payload(index: int, size: int) -> bytes:
    return bytes((index * 7 + k) % 251 for k in range(size))


def make(path: Path, sizes: list[int], fail: tuple[int, ...] = (), threads_per_process: int = 2) -> JobDir:
    work = JobDir(path)
    work.create()
    doc: dict[str, Any] = {"sizes": sizes, "fail": list(fail)}
    if threads_per_process != 2:
        doc["threads_per_process"] = threads_per_process
    plan = json.dumps(doc).encode()
    work.write_plan(plan, kind=KIND, tasks=len(sizes), meta={"output": "echo"})
    return work


class EchoRunner:
    def __init__(self, job: EchoJob, should_stop: Callable[[], bool]) -> None:
        self.job = job
        self.should_stop = should_stop

    def run(self, index: int, progress: ProgressFn, done: DoneFn) -> dict[str, Any]:
        work = self.job.dir
        tmp = work.new_task_dir(index)
        try:
            if self.should_stop():
                raise Stopped
            if index in self.job.plan["fail"]:
                raise InputError(f"task {index}: bad input (on purpose)")
            size = self.job.plan["sizes"][index]
            (tmp / "out.bin").write_bytes(payload(index, size))
            record = {
                "task": index,
                "pid": os.getpid(),
                "parts": {"out.bin": list(astuple(part_digest(tmp / "out.bin")))},
            }
            (tmp / DONE).write_text(json.dumps(record))
            work.commit_task(tmp, index)
        except BaseException:
            remove_path(tmp)
            raise
        progress(1, size, size)
        done(index, record)
        return record

    def drain(self) -> None:
        pass


class EchoJob:
    kind = KIND

    def __init__(self, work: JobDir) -> None:
        self.work = work
        self.plan: dict[str, Any] = json.loads(work.read_plan())

    @property
    def dir(self) -> JobDir:
        return self.work

    def task_cost(self, index: int) -> int:
        return int(self.plan["sizes"][index])

    def setup_process(self) -> None:
        pass

    def threads_per_process(self) -> int:
        return int(self.plan.get("threads_per_process", 2))

    def runner(self, should_stop: Callable[[], bool]) -> EchoRunner:
        return EchoRunner(self, should_stop)

    def finalize(self) -> dict[str, Any]:
        tasks = range(len(self.plan["sizes"]))
        if not all(self.work.is_done(i) for i in tasks):
            raise StorekitError(f"{self.work.path}: tasks are not done; nothing was published")
        out = output_of(self.work.path)
        out.write_bytes(b"".join((self.work.task_dir(i) / "out.bin").read_bytes() for i in tasks))
        self.work.remove()
        return {"status": "prepared", "dataset": str(out), "tasks": len(tasks)}


def output_of(path: Path) -> Path:
    return path.parent / "echo.out"


def load(path: Path, site: Any) -> EchoJob:
    return EchoJob(JobDir(path))
