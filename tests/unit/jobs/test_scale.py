"""The job layer's file-system metadata operations grow linearly in tasks (issue 12's scale check,
benchmarks/sim_jobs.py at a small scale): a finalize, element or submit that listed or stat'ed every
task once per task would grow quadratically and fail here. Counted with strace, not timed."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import IN_CI, REPO


@pytest.mark.slow  # a 10k-task simulation under strace (~10-20 s)
def test_metadata_operations_per_task_do_not_grow_with_the_task_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("strace") is None:
        if IN_CI:
            pytest.fail("strace is required in CI (scripts/test.sh installs it)")
        pytest.skip("strace is not installed")
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the simulation's processes run this checkout
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import sim_jobs
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    small, big = (sim_jobs.simulate(tmp_path / str(n), n, 4, trace_ops=True, timed=False) for n in (100, 300))
    assert big["tasks"] >= 2 * small["tasks"], (small["tasks"], big["tasks"])
    for phase in ("elements", "finalize"):
        per_task = [run["phases"][phase]["shared_metadata_ops_per_task"] for run in (small, big)]
        assert per_task[1] <= per_task[0] * 1.05, (phase, per_task)
        counts = big["phases"][phase]["shared"]
        assert counts["rename" if phase == "elements" else "remove"] >= big["tasks"]  # records were made
    submit = [run["phases"]["submit"]["shared_metadata_ops"] for run in (small, big)]
    assert submit[1] <= submit[0] * 1.05, submit  # the same 100 input files: planning does not grow
    assert big["tokens"] > small["tokens"] > 0
