"""The element that sees every task done finalizes in-process; one winner; a failure leaves the work."""

from __future__ import annotations

import threading
from pathlib import Path

from storekit import faults
from storekit.executors.local import LocalExecutor
from storekit.slurm.inline import all_done, claim, finalize_inline
from tests.unit.jobs import echo_job


def run_tasks(job: echo_job.EchoJob, tasks: list[int]) -> None:
    LocalExecutor().run(job, tasks, workers=1, progress=lambda d, t, b: None)


def test_only_the_element_that_sees_every_task_done_finalizes(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", [10, 20, 30])
    job = echo_job.EchoJob(work)
    said: list[str] = []
    run_tasks(job, [0, 1])
    assert finalize_inline(work, job, "7", "7_0", said.append) is None  # task 2 is not done
    assert not list(work.path.glob("finalizing-inline.*"))  # and nothing was claimed
    run_tasks(job, [2])
    result = finalize_inline(work, job, "7", "7_1", said.append)
    assert result is not None and result["status"] == "prepared"
    expected = b"".join(echo_job.payload(i, n) for i, n in enumerate([10, 20, 30]))
    assert echo_job.output_of(work.path).read_bytes() == expected
    assert not work.path.exists()  # finalize removed the work dir
    assert any("finalizing here" in line for line in said), said


def test_two_elements_that_both_see_everything_done_finalize_once(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", [5, 5])
    job = echo_job.EchoJob(work)
    run_tasks(job, [0, 1])
    said: list[str] = []
    second: list[object] = []

    def other_element() -> None:  # runs while the first holds the claim, before it finalizes
        second.append(finalize_inline(work, echo_job.EchoJob(work), "7", "7_1", said.append))

    with faults.at("slurm.inline-finalize", lambda: threading.Thread(target=other_element).run()):
        first = finalize_inline(work, job, "7", "7_0", said.append)
    assert first is not None and second == [None]
    assert "element 7_1: every task is done; another element finalizes" in said
    assert finalize_inline(work, job, "7", "7_2", said.append) is None  # one that looks after it
    assert said[-1] == "element 7_2: every task is done; another element finalized"


def test_each_array_has_its_own_claim(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", [1])
    assert claim(work, "7") and not claim(work, "7")
    assert claim(work, "8")  # a rerun's array is not blocked by an earlier array's claim


def test_a_failed_inline_finalize_publishes_nothing_and_leaves_it_to_the_finalize_job(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", [5, 5])
    job = echo_job.EchoJob(work)
    run_tasks(job, [0, 1])
    said: list[str] = []

    def fail() -> None:
        raise OSError(5, "Input/output error (injected)")

    with faults.at("slurm.inline-finalize", fail):
        assert finalize_inline(work, job, "7", "7_1", said.append) is None
    assert not echo_job.output_of(work.path).exists()
    assert work.done_tasks() == {0, 1}  # the work is kept for the finalize job
    assert any("did not finish" in line and "Input/output error" in line for line in said), said
    assert job.finalize()["status"] == "prepared"  # what the finalize job then does


def test_all_done_looks_at_the_highest_tasks_and_then_at_every_one(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", [1] * 12)
    job = echo_job.EchoJob(work)
    run_tasks(job, list(range(1, 12)))  # all but task 0, below the probed ones
    assert not all_done(work)
    run_tasks(job, [0])
    assert all_done(work)
    work2 = echo_job.make(tmp_path / "job2", [1] * 12)
    run_tasks(echo_job.EchoJob(work2), list(range(11)))  # all but the highest
    assert not all_done(work2)
