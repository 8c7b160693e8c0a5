"""--slurm-wait: finished when the work dir is gone; ended without it when the jobs left the queue."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from storekit.slurm.commands import QueuedJob
from storekit.slurm.wait import ask_interval, look_interval, wait_for_jobs
from tests.conftest import run_storekit


class Cluster:
    """A clock that the waiter's sleeps advance, and a queue that answers from a script."""

    def __init__(self, work: Path, *, remove_after_looks: int | None, queue: list[list[QueuedJob]]) -> None:
        self.now = 100.0
        self.work = work
        self.looks = 0
        self.remove_after_looks = remove_after_looks
        self.queue = queue
        self.asked = 0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        self.looks += 1
        if self.looks == self.remove_after_looks:
            shutil.rmtree(self.work)  # finalize published and removed the work dir

    def queued(self, ids: Sequence[str]) -> list[QueuedJob]:
        assert list(ids) == ["7", "8"]
        self.asked += 1
        return self.queue.pop(0) if len(self.queue) > 1 else self.queue[0]


def row(job: str, reason: str = "None") -> QueuedJob:
    return QueuedJob(job_id=job, array_job_id=job, array_index=None, state="PENDING", reason=reason)


def test_it_returns_at_the_first_look_after_the_work_dir_is_gone(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    cluster = Cluster(tmp_path / "work", remove_after_looks=160, queue=[[row("7"), row("8")]])
    waited = wait_for_jobs(tmp_path / "work", ["7", "8"], clock=cluster.clock, sleep=cluster.sleep,
                           queued=cluster.queued)  # fmt: skip
    assert waited.finished and cluster.looks == 160
    assert abs(waited.seconds - sum(cluster.slept)) < 1e-9
    assert max(cluster.slept) <= 0.01 + 1e-9  # the first seconds are looked at every 10 ms
    assert cluster.asked == 1  # in 1.6 s, Slurm was asked once (at 1 s), the work dir looked at 160 times


def test_jobs_gone_with_the_work_dir_still_there_is_an_end_without_publishing(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    never = [row("8", "DependencyNeverSatisfied")]  # a finalize that can never start counts as gone
    cluster = Cluster(tmp_path / "work", remove_after_looks=None, queue=[[row("7"), row("8")], never])
    waited = wait_for_jobs(tmp_path / "work", ["7", "8"], clock=cluster.clock, sleep=cluster.sleep,
                           queued=cluster.queued)  # fmt: skip
    assert not waited.finished and cluster.asked == 2
    assert (tmp_path / "work").is_dir()


def test_the_intervals_grow_with_the_time_waited_and_stay_bounded() -> None:
    assert look_interval(0) == 0.01 and look_interval(10) == 0.025 and look_interval(3600) == 1.0
    assert ask_interval(0) == 1.0 and ask_interval(100) == 5.0 and ask_interval(3600) == 30.0


def test_slurm_wait_without_the_slurm_executor_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_storekit(["prepare", "dataset", "--slurm-wait", "--work-dir", str(tmp_path / "w")])
    assert proc.returncode == 2 and "--slurm-wait needs --executor slurm" in proc.stderr, proc.stderr
    assert not (tmp_path / "w").exists()
