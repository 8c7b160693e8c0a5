"""`storekit` processes (the CLI, every Slurm element) start no OpenBLAS threads: storekit never calls
BLAS, and each thread numpy's import starts spins on a CPU the tasks need."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = (
    "import storekit.__main__, numpy, os; "
    "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))"
)


def _probe(env: dict[str, str]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="OpenBLAS starts no thread on one CPU")
def test_numpy_under_storekit_runs_on_one_thread() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    assert _probe(env) == ["1", "1"]


def test_a_users_own_setting_is_kept() -> None:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}
    assert _probe(env)[0] == "2"
