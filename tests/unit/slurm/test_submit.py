"""Submission plans (what --dry-run prints) and what reaches sbatch's environment."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from storekit.errors import StorekitError
from storekit.jobs.workdir import JobDir, Submission
from storekit.slurm.batches import ClusterLimits
from storekit.slurm.run import element_identity
from storekit.slurm.script import SlurmOptions
from storekit.slurm.submit import element_tasks, job_environment, plan_submission


def test_a_plan_over_max_array_size_keeps_indices_below_it(tmp_path: Path) -> None:
    work = JobDir(tmp_path / "w")
    plan = plan_submission(
        work,
        range(25),
        job_name="sk",
        log_dir=tmp_path / "logs",
        options=SlurmOptions(partition="cpu", max_concurrent=2),
        config="/etc/storekit.toml",
        limits=ClusterLimits(max_array_size=10, max_job_count=10000),
    )
    assert plan.elements.elements == 9 and plan.elements.per_element == 3  # 0-8 < MaxArraySize 10
    assert "#SBATCH --array=0-8%2" in plan.array_script
    assert f"exec {sys.executable} -m storekit jobs run-element {work.path} --config /etc/storekit.toml" in (
        plan.array_script
    )
    # finalize: one job, no array, no concurrency cap, same partition
    assert "--array" not in plan.finalize_script and "#SBATCH --partition=cpu" in plan.finalize_script
    assert "jobs finalize" in plan.finalize_script
    assert not (tmp_path / "logs").exists()  # planning writes nothing


def test_credentials_never_reach_the_job_environment() -> None:
    env = {
        "PATH": "/usr/bin",
        "PYTHONPATH": "/shared/sk",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SESSION_TOKEN": "t",
        "STOREKIT_TEST_S3_SECRET": "x",
        "HF_TOKEN": "h",
        "DB_PASSWORD": "p",
    }
    assert job_environment(env) == {"PATH": "/usr/bin", "PYTHONPATH": "/shared/sk"}


def test_an_element_finds_its_tasks_in_the_recorded_submission(tmp_path: Path) -> None:
    work = JobDir(tmp_path / "w")
    work.create()
    work.record_submission(Submission(executor="slurm", job_id="77", array="0-1", batches=[[0, 1, 2], [5]]))
    assert element_tasks(work, "77", 1) == [5]
    with pytest.raises(StorekitError, match="not a submission"):
        element_tasks(work, "78", 0)
    with pytest.raises(StorekitError, match="not a submission"):
        element_tasks(work, "77", 2)
    assert element_identity({"SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "1"}) == ("77", 1)
    with pytest.raises(StorekitError, match="inside a Slurm array job"):
        element_identity({"SLURM_JOB_ID": "5"})
