"""How the local executor spreads workers over threads and processes."""

from __future__ import annotations

import pytest

from storekit.executors.local import THREADS_PER_PROCESS, split_workers


@pytest.mark.parametrize("workers", range(1, 20))
def test_split_uses_every_worker_once_and_few_processes(workers: int) -> None:
    threads = split_workers(workers)
    assert sum(threads) == workers
    assert max(threads) <= THREADS_PER_PROCESS
    assert max(threads) - min(threads) <= 1  # balanced
    assert len(threads) == -(-workers // THREADS_PER_PROCESS)


def test_two_workers_are_two_threads_of_one_process() -> None:
    assert split_workers(2) == [2]
    assert split_workers(3) == [2, 1]


def test_one_thread_per_process_forks_one_process_per_worker() -> None:
    assert split_workers(2, 1) == [1, 1]
    assert split_workers(3, 1) == [1, 1, 1]
    assert split_workers(1, 1) == [1]  # one worker still runs in the calling process
