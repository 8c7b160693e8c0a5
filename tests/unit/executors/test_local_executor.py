"""The local executor on the job layer: tasks in threads and forked processes, whole completion
records, and a failing task's record (error, exit code) with nothing half-written left behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from storekit.errors import ExitCode, StorekitError
from storekit.executors.base import get_executor
from storekit.jobs.run import run_tasks
from storekit.jobs.status import job_status
from tests.unit.jobs import echo_job

SIZES = [300, 5000, 40, 1200, 77, 900, 3000, 10, 650]


def _check_outputs(work: Any, indexes: list[int]) -> None:
    for i in indexes:
        work.check_parts(i, work.read_done(i))
        assert (work.task_dir(i) / "out.bin").read_bytes() == echo_job.payload(i, SIZES[i])


@pytest.mark.parametrize("workers", [1, 2, 3])  # the caller's thread, two threads, two processes
def test_every_task_runs_once_with_its_bytes(tmp_path: Path, workers: int) -> None:
    work = echo_job.make(tmp_path / "job", SIZES)
    job = echo_job.load(work.path, None)
    seen: list[int] = []
    units = [0]

    def progress(docs: int, n: int, nbytes: int) -> None:
        units[0] += n

    report = get_executor("local").run(
        job, range(len(SIZES)), workers=workers, progress=progress, on_done=lambda i, r: seen.append(i)
    )
    assert sorted(seen) == list(range(len(SIZES))) and report.tasks_run == len(SIZES)
    assert units[0] == sum(SIZES)
    _check_outputs(work, list(range(len(SIZES))))
    assert job_status(work).complete
    assert not work.scan().in_flight
    if workers == 3:
        assert len(report.worker_peak_rss) == 2  # two forked processes reported


@pytest.mark.parametrize("workers", [1, 3])
def test_failed_task_leaves_its_record_and_no_temp(tmp_path: Path, workers: int) -> None:
    work = echo_job.make(tmp_path / "job", SIZES, fail=(4,))
    with pytest.raises(StorekitError, match="task 4: bad input") as info:
        run_tasks(work.path, list(range(len(SIZES))), None, workers=workers, log="/logs/e_4.out")
    assert info.value.exit_code == ExitCode.ERROR
    st = job_status(work)
    assert st.states["failed"] == [4]
    assert st.failures[4]["error"] == "task 4: bad input (on purpose)"
    assert (st.failures[4]["exit_code"], st.failures[4]["log"]) == (1, "/logs/e_4.out")
    assert not work.scan().in_flight
    _check_outputs(work, st.states["done"])


def test_run_tasks_skips_done_and_refuses_unknown_tasks(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", SIZES)
    first = run_tasks(work.path, [0, 1, 2], None, workers=2)
    assert (first["run"], first["skipped"], first["tasks"]) == (3, 0, "0-2")
    again = run_tasks(work.path, list(range(len(SIZES))), None, workers=2)
    assert (again["run"], again["skipped"]) == (len(SIZES) - 3, 3)
    _check_outputs(work, list(range(len(SIZES))))
    with pytest.raises(StorekitError, match="the plan has 9 tasks") as info:
        run_tasks(work.path, [9], None)
    assert info.value.exit_code == ExitCode.USAGE


def test_a_later_success_clears_the_failure_record(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", SIZES)
    work.record_failure(5, "earlier attempt died", exit_code=5)
    run_tasks(work.path, [5], None, workers=1)
    assert work.read_failure(5) is None and job_status(work).states["done"] == [5]
