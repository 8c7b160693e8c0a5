"""The skip predicate: a task another run completed after it was scheduled, but before it started,
is counted skipped and not run, in the caller's threads and in forked worker processes alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storekit import faults
from storekit.executors.local import LocalExecutor
from storekit.jobdir import DONE, JobDir
from tests.unit.jobs import echo_job

SIZES = [40, 30, 20, 10]  # largest first: the executor starts them in index order


def complete_elsewhere(work: JobDir, index: int) -> None:
    """What another Slurm element does: its own temp dir, renamed whole (first commit wins)."""
    if work.is_done(index):
        return
    tmp = work.new_task_dir(index)
    (tmp / "out.bin").write_bytes(echo_job.payload(index, SIZES[index]))
    (tmp / DONE).write_text(json.dumps({"task": index, "by": "another element"}))
    work.commit_task(tmp, index)


@pytest.mark.parametrize(
    ("workers", "per_process"),
    [(1, 2), (2, 2), (2, 1)],  # one thread, two threads of this process, two forked processes
)
def test_a_task_completed_elsewhere_after_scheduling_is_skipped_not_rerun(
    tmp_path: Path, workers: int, per_process: int
) -> None:
    work = echo_job.make(tmp_path / "job", SIZES, threads_per_process=per_process)
    job = echo_job.load(work.path, None)
    done: list[int] = []
    tokens = [0]

    def progress(docs: int, n: int, nbytes: int) -> None:
        tokens[0] += n

    def others_finish() -> None:  # at each claim (in whichever process), before the check
        for index in (0, 2):
            complete_elsewhere(work, index)

    with faults.at("executor.task-claimed", others_finish):
        report = LocalExecutor().run(
            job, [0, 1, 2, 3], workers=workers, progress=progress, on_done=lambda i, r: done.append(i),
            skip=work.is_done,
        )  # fmt: skip
    assert sorted(done) == [1, 3]  # on_done only for what this run ran
    assert (report.tasks_run, report.tasks_skipped) == (2, 2)
    assert tokens[0] == SIZES[1] + SIZES[3]
    assert work.done_tasks() == {0, 1, 2, 3} and not work.scan().in_flight
    for index in (0, 2):  # the other run's records stand: not replaced by a second run
        assert work.read_done(index).get("by") == "another element"
    for index in (1, 3):
        record: dict[str, Any] = work.read_done(index)
        assert "by" not in record
        work.check_parts(index, record)


def test_without_a_predicate_every_task_runs(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", SIZES)
    job = echo_job.load(work.path, None)
    report = LocalExecutor().run(job, [0, 1, 2, 3], workers=1, progress=lambda d, t, b: None)
    assert (report.tasks_run, report.tasks_skipped) == (4, 0)
