"""An element done with its own tasks helps with the others' unstarted ones, highest first, leaves
in-flight and failed ones alone, and an owner skips what a helper completed."""

from __future__ import annotations

import gc
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from storekit import faults
from storekit.durable import TMP_MARK
from storekit.errors import ExitCode, InputError, StorekitError
from storekit.executors.local import LocalExecutor
from storekit.jobdir import JobDir, Submission
from storekit.slurm.inline import finalize_inline
from storekit.slurm.run import run_element
from tests.unit.jobs import echo_job

SIZES = [10] * 8
BATCHES = [[0, 1], [2, 3, 4, 5, 6, 7]]  # element 0 owns two tasks, element 1 six


@pytest.fixture(autouse=True)
def keep_signal_handlers() -> Iterator[None]:
    """run_element turns USR1/TERM into a stop (and ignores them when it stops): undo it."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def make(tmp_path: Path, fail: tuple[int, ...] = ()) -> JobDir:
    work = echo_job.make(tmp_path / "job", SIZES, fail=fail, threads_per_process=1)
    logs = tmp_path / "logs"
    logs.mkdir()
    work.record_submission(
        Submission(executor="slurm", job_id="77", array="0-1", batches=BATCHES, extra={"log_dir": str(logs)})
    )
    return work


def env(element: int, cpus: int = 2) -> dict[str, str]:
    return {"SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": str(element), "SLURM_CPUS_PER_TASK": str(cpus)}


def in_flight_elsewhere(work: JobDir, index: int) -> Path:
    """A temp dir another node's element is writing (its host is not this one: may be alive)."""
    tmp = work.tasks / f".{index:06d}{TMP_MARK}4242-1@some-other-node.abcd1234"
    tmp.mkdir(parents=True)
    return tmp


def test_an_element_done_with_its_tasks_runs_the_unstarted_ones_highest_first(tmp_path: Path) -> None:
    work = make(tmp_path)
    LocalExecutor().run(
        echo_job.EchoJob(work), [2], workers=1, progress=lambda d, t, b: None
    )  # owner's first
    flying = in_flight_elsewhere(work, 7)  # another helper (or the owner) is writing 7
    said: list[str] = []
    result = run_element(work.path, None, env=env(0), say=said.append)
    helping = [line.split(": ", 1)[1] for line in said if "helping with" in line]
    assert helping == ["helping with tasks 6, 5", "helping with tasks 4, 3"]  # 2 workers a round
    assert (result.ran, result.helped, result.finalized) == (2, 4, None)  # 7 is not done: no finalize
    assert work.done_tasks() == {0, 1, 2, 3, 4, 5, 6} and flying.is_dir()  # in flight: left alone

    flying.rmdir()  # its run died; the owner, requeued, runs what is left and finalizes
    owner = run_element(work.path, None, env=env(1), say=said.append)
    assert (owner.ran, owner.skipped, owner.helped) == (1, 5, 0)
    assert owner.finalized is not None and owner.finalized["status"] == "prepared"
    expected = b"".join(echo_job.payload(i, n) for i, n in enumerate(SIZES))
    assert echo_job.output_of(work.path).read_bytes() == expected


def test_a_task_with_a_failure_record_is_left_to_its_owner(tmp_path: Path) -> None:
    work = make(tmp_path)
    work.record_failure(6, "bad input (earlier attempt)", exit_code=3, log=None)
    result = run_element(work.path, None, env=env(0, cpus=1), say=lambda line: None)
    assert result.helped == 5 and work.done_tasks() == {0, 1, 2, 3, 4, 5, 7}


def test_a_helped_task_that_fails_is_handed_back_to_its_owner_and_the_helper_succeeds(tmp_path: Path) -> None:
    """One bad input fails one element: the helper's record names the owner (77_1) and its log, the
    helper stops helping and returns as its own tasks did; the owner then fails it itself."""
    work = make(tmp_path, fail=(5,))
    said: list[str] = []
    result = run_element(work.path, None, env=env(0, cpus=1), say=said.append)
    assert result.ran == 2 and result.finalized is None  # its own tasks; no finalize (5 failed)
    failure = work.read_failure(5)
    assert failure is not None and failure["log"] == str(tmp_path / "logs" / "77_1.out")
    assert failure["element"] == "77_1" and failure["helper"] == "77_0", failure
    assert failure["exit_code"] == int(ExitCode.ERROR) and not work.scan().in_flight
    assert any("task 5 failed while helping; left to 77_1" in line for line in said), said
    with pytest.raises(InputError, match="task 5: bad input"):  # the owner runs it: it fails there
        run_element(work.path, None, env=env(1, cpus=1), say=lambda line: None)


def test_an_owner_skips_its_tasks_a_helper_completed_after_it_started(tmp_path: Path) -> None:
    work = make(tmp_path)
    job = echo_job.EchoJob(work)

    def helper_finishes_the_far_end() -> None:  # at the owner's first claim (task 2)
        for index in (7, 6):
            if not work.is_done(index):
                job.runner(lambda: False).run(index, lambda d, t, b: None, lambda i, r: None)

    said: list[str] = []
    with faults.at("executor.task-claimed", helper_finishes_the_far_end):
        result = run_element(work.path, None, env=env(1, cpus=1), say=said.append)
    assert (result.ran, result.done_by_others) == (4, 2)  # 2..5 run; 6 and 7 found done, not rerun
    assert not any(f"task {i} done" in line for line in said for i in (6, 7)), said


def test_a_stop_while_helping_exits_without_a_requeue(tmp_path: Path) -> None:
    work = make(tmp_path)
    said: list[str] = []

    def stop() -> None:  # USR1/TERM arrive as KeyboardInterrupt in the main thread
        raise KeyboardInterrupt

    with faults.at("slurm.element-helping", stop):
        result = run_element(work.path, None, env=env(0), say=said.append)
    assert not result.requeued and result.finalized is None  # no SLURM_JOB_ID: a requeue would raise
    assert work.done_tasks() == {0, 1}
    assert "stopped by a signal while helping" in said[-1]


def test_an_owner_whose_task_a_helper_finished_and_another_finalized_leaves_no_husk(tmp_path: Path) -> None:
    """A collision: while the owner is about to start its task a helper completes it and another
    element, seeing every task done, finalizes and removes the work dir. The owner must neither bring
    the work dir back (an empty tasks/ husk, no job.json) nor fail: the job is over."""
    work = make(tmp_path)
    LocalExecutor().run(
        echo_job.EchoJob(work), [1, 2, 3, 4, 5, 6, 7], workers=1, progress=lambda d, t, b: None
    )
    fired: list[object] = []

    def helper_finishes_and_another_finalizes() -> None:
        if not fired:
            fired.append(None)
            LocalExecutor().run(echo_job.EchoJob(work), [0], workers=1, progress=lambda d, t, b: None)
            fired.append(finalize_inline(work, echo_job.EchoJob(work), "77", "77_1", lambda line: None))

    said: list[str] = []
    with faults.at("executor.task-claimed", helper_finishes_and_another_finalizes):
        result = run_element(work.path, None, env=env(0, cpus=1), say=said.append)
    assert isinstance(fired[1], dict) and fired[1]["status"] == "prepared"
    assert not work.path.exists(), sorted(p.name for p in work.path.rglob("*"))
    assert (result.ran, result.finalized) == (0, None) and any("the work dir is gone" in s for s in said), (
        said
    )
    expected = b"".join(echo_job.payload(i, n) for i, n in enumerate(SIZES))
    assert echo_job.output_of(work.path).read_bytes() == expected


def test_a_task_dir_is_never_created_in_a_removed_work_dir(tmp_path: Path) -> None:
    work = make(tmp_path)
    shutil.rmtree(work.path)
    with pytest.raises(StorekitError):
        work.new_task_dir(3)
    assert not work.path.exists()


def test_tasks_run_with_the_garbage_collector_the_entry_turned_off_for_start_up(tmp_path: Path) -> None:
    work = make(tmp_path)
    seen: list[bool] = []
    gc.disable()  # as element_entry.run does before its imports
    try:
        with faults.at("slurm.element-task-done", lambda: seen.append(gc.isenabled())):
            result = run_element(work.path, None, env=env(0, cpus=1), say=lambda line: None)
        assert seen == [True] * result.ran and result.ran == 2 and gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


def test_a_helper_whose_job_another_element_finalized_ends_quietly(tmp_path: Path) -> None:
    """A helper's task is cut off by another element finalizing the job (the work dir removed under
    it, CI7's race: the helper's own step then failed with a bare FileNotFoundError): the helper
    ends as an element whose work was finished elsewhere (exit 0, one line), not with a traceback
    that leaves a FAILED element and the finalize job's dependency never satisfied."""
    work = make(tmp_path)
    claims = [0]

    def another_element_finalizes() -> None:  # at the helper's first claimed task
        claims[0] += 1
        if claims[0] == 3:  # its own tasks 0 and 1 were the first two claims
            shutil.rmtree(work.path)
            # what the task's next step then meets (prepare's source record, pipeline/node.py)
            raise FileNotFoundError(2, "No such file or directory", str(work.path / "sources"))

    said: list[str] = []
    with faults.at("executor.task-claimed", another_element_finalizes):
        result = run_element(work.path, None, env=env(0, cpus=1), say=said.append)
    assert result.ran == 2 and result.finalized is None
    assert said[-1].endswith("another element finalized the job"), said
