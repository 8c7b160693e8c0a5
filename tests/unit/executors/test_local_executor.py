"""The local executor on the job layer: tasks in threads and forked processes, whole completion
records, and a failing task's record (error, exit code) with nothing half-written left behind."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pytest

from storekit.errors import ExitCode, StorekitError
from storekit.executors.base import get_executor
from storekit.interrupts import interrupt_on
from storekit.jobdir import part_digest
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


class _SlowStopRunner:
    """Task 0 asks for the stop itself, then keeps committing for a while after it: what a
    background commit still renaming looks like to the executor."""

    def __init__(self, job: Any, should_stop: Any, caught: threading.Event, finished: list[str]) -> None:
        self.job, self.should_stop, self.caught, self.finished = job, should_stop, caught, finished

    def run(self, index: int, progress: Any, done: Any) -> None:
        work = self.job.dir
        tmp = work.new_task_dir(index)
        (tmp / "out.bin").write_bytes(echo_job.payload(index, SIZES[index]))
        os.kill(os.getpid(), signal.SIGTERM)  # the main thread is waiting for this thread
        while not self.should_stop():
            time.sleep(0.005)  # until the executor has taken the signal
        # a correct executor is still waiting for this thread, so the test cannot have caught the
        # stop yet; one that believed the thread ended has already returned and the test sets this
        if self.caught.wait(1.0):
            self.finished.append("after the executor returned")
        record = {"task": index, "parts": {"out.bin": list(astuple(part_digest(tmp / "out.bin")))}}
        (tmp / "done.json").write_text(json.dumps(record))
        work.commit_task(tmp, index)
        self.finished.append("committed")
        done(index, record)

    def drain(self) -> None:
        pass


def test_a_stop_waits_for_the_task_thread_it_interrupted(tmp_path: Path) -> None:
    """SIGTERM while the executor waits for its task thread: the executor returns (exit 130) only
    once that thread is done with the work dir, so no temp removal races a commit (on Python 3.11,
    a KeyboardInterrupt inside Thread.join() made a live thread look finished)."""
    work = echo_job.make(tmp_path / "job", SIZES)
    job = echo_job.load(work.path, None)
    caught = threading.Event()
    finished: list[str] = []
    job.runner = lambda should_stop: _SlowStopRunner(job, should_stop, caught, finished)  # type: ignore[method-assign]
    old = signal.getsignal(signal.SIGTERM)
    interrupt_on(signal.SIGTERM)
    try:
        with pytest.raises(StorekitError) as info:
            get_executor("local").run(job, [0], workers=1, progress=lambda d, n, b: None)
        caught.set()
    finally:
        signal.signal(signal.SIGTERM, old)
    assert info.value.exit_code == ExitCode.INTERRUPTED
    assert finished == ["committed"]  # the thread finished before the executor returned
    assert work.done_tasks() == {0} and not work.scan().in_flight
    work.check_parts(0, work.read_done(0))


class _WaitsForTheStopRunner:
    """Its task waits until the executor asks it to stop, or until the test has the executor's
    answer: which came first says whether the executor waited for the thread it had started."""

    def __init__(self, should_stop: Any, returned: threading.Event, seen: list[str]) -> None:
        self.should_stop, self.returned, self.seen = should_stop, returned, seen

    def run(self, index: int, progress: Any, done: Any) -> None:
        while not self.should_stop() and not self.returned.is_set():
            time.sleep(0.005)  # polls two events; no outcome depends on how long this takes
        self.seen.append("asked to stop" if self.should_stop() else "after the executor returned")

    def drain(self) -> None:
        pass


def test_a_stop_signal_while_threads_start_still_waits_for_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM right after a task thread started (fault point executor.thread-started): the stop
    reaches that thread and the executor returns only once it ended (a stop that cut the start
    loop used to bypass the wait, and the caller removed temps under a running task)."""
    work = echo_job.make(tmp_path / "job", SIZES)
    job = echo_job.load(work.path, None)
    returned = threading.Event()
    seen: list[str] = []
    job.runner = lambda should_stop: _WaitsForTheStopRunner(should_stop, returned, seen)  # type: ignore[method-assign]
    monkeypatch.setenv("STOREKIT_FAULTS", "executor.thread-started=term")
    old = signal.getsignal(signal.SIGTERM)
    interrupt_on(signal.SIGTERM)
    try:
        with pytest.raises(StorekitError) as info:
            get_executor("local").run(job, [0], workers=1, progress=lambda d, n, b: None)
    finally:
        returned.set()
        signal.signal(signal.SIGTERM, old)
    assert info.value.exit_code == ExitCode.INTERRUPTED
    assert seen == ["asked to stop"]  # ended before the executor returned, told by the stop


@pytest.mark.parametrize(
    ("per_process", "env", "processes"),
    [(1, None, 2), (2, None, 0), (2, "1", 2), (1, "2", 0)],  # 0: two threads of the calling process
)
def test_the_job_or_the_environment_decides_threads_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_process: int, env: str | None, processes: int
) -> None:
    if env is None:
        monkeypatch.delenv("STOREKIT_THREADS_PER_PROCESS", raising=False)
    else:
        monkeypatch.setenv("STOREKIT_THREADS_PER_PROCESS", env)
    work = echo_job.make(tmp_path / "job", SIZES, threads_per_process=per_process)
    job = echo_job.load(work.path, None)
    records: dict[int, dict[str, Any]] = {}
    report = get_executor("local").run(
        job, range(len(SIZES)), workers=2, progress=lambda *a: None, on_done=records.__setitem__
    )
    assert len(report.worker_peak_rss) == processes
    pids = {r["pid"] for r in records.values()}
    assert (os.getpid() in pids) == (processes == 0)
    assert len(pids) <= max(1, processes)
    _check_outputs(work, list(range(len(SIZES))))


@pytest.mark.parametrize("bad", ["0", "two", "-1"])
def test_a_bad_threads_per_process_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv("STOREKIT_THREADS_PER_PROCESS", bad)
    work = echo_job.make(tmp_path / "job", SIZES)
    with pytest.raises(StorekitError, match="STOREKIT_THREADS_PER_PROCESS") as info:
        get_executor("local").run(echo_job.load(work.path, None), [0], workers=2, progress=lambda *a: None)
    assert info.value.exit_code == ExitCode.USAGE
    assert not work.scan().done
