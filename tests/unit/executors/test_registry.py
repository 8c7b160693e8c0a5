"""Executors, job kinds and bench phase runners are found by name; unknown names are usage errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from storekit.bench.runner import PhaseRunner
from storekit.errors import ExitCode, NotFoundError, UsageError
from storekit.executors.base import get_executor, load_job, phase_runner, phase_runner_type
from storekit.executors.local import LocalExecutor
from storekit.jobdir import JobDir


def test_local_is_registered_for_tasks_and_bench_phases() -> None:
    assert isinstance(get_executor("local"), LocalExecutor)
    assert isinstance(phase_runner("local", "posix"), PhaseRunner)


def test_slurm_is_registered_for_bench_phases_as_local_is() -> None:
    """bench io picks its phase runner by executor name: one agent per node for `slurm`, which
    reads the launch options only it takes."""
    from storekit.bench.cluster.launch import AgentSrunOptions
    from storekit.bench.cluster.runner import ClusterRunner

    runner = phase_runner("slurm", "posix", launch=AgentSrunOptions(nodes=3))
    assert isinstance(runner, ClusterRunner) and runner.nodes == 3
    assert "--nodes" in phase_runner_type("slurm").launch_options
    assert phase_runner_type("local").launch_options == {}


def test_unknown_executor_names_the_known_ones() -> None:
    with pytest.raises(UsageError, match=r"unknown executor 'nope' \(known: .*local") as info:
        get_executor("nope")
    assert info.value.exit_code == ExitCode.USAGE


def test_unknown_job_kind_is_refused(tmp_path: Path) -> None:
    work = JobDir(tmp_path / "job")
    work.create()
    work.write_plan(b"{}", kind="no-such-kind", tasks=1)
    with pytest.raises(UsageError, match="unknown job kind 'no-such-kind'"):
        load_job(work.path, None)
    with pytest.raises(NotFoundError):
        load_job(tmp_path, None)
