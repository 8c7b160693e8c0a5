"""Submission plans (what --dry-run prints) and what reaches sbatch's environment."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from storekit.errors import ExitCode, StorekitError
from storekit.jobdir import JobDir, Submission
from storekit.slurm.batches import ClusterLimits
from storekit.slurm.run import element_identity
from storekit.slurm.submit import element_tasks, job_environment, plan_submission, submit
from storekit.slurmopts import SlurmOptions
from tests.conftest import run_storekit
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl


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


def test_an_array_sbatch_refuses_leaves_neither_scripts_nor_log_dirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing was submitted, so nothing of the submission stays: the two scripts go, and so do the
    log dirs it made (LOG_DIR/<work dir>/ and a LOG_DIR made for it); a log dir holding other files
    stays. (Here sbatch is not on PATH: the refusal every submission can meet.)"""
    work = JobDir(tmp_path / "w")
    work.create()
    kept = tmp_path / "kept-logs"
    kept.mkdir()
    (kept / "other.log").write_text("someone else's\n")
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))
    for logs, stays in ((tmp_path / "logs" / "sk-w", tmp_path), (kept / "sk-w", kept)):
        plan = plan_submission(
            work,
            range(3),
            job_name="sk",
            log_dir=logs,
            options=SlurmOptions(partition="cpu"),
            config=None,
            limits=ClusterLimits(max_array_size=10, max_job_count=10000),
        )
        refused: list[bool] = []
        with pytest.raises(StorekitError, match="sbatch not found"):
            submit(work, plan, refused=refused)
        assert refused == [True] and not logs.exists()
        assert sorted(p.name for p in stays.iterdir()) == (
            ["other.log"] if stays == kept else ["kept-logs", "w"]
        )
    assert work.submissions() == []


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
        "MY_PASS": "p",  # *PASS*, *CREDENTIAL*, *AUTH*: what the issue (#28) names
        "GOOGLE_APPLICATION_CREDENTIALS": "/keys/sa.json",
        "WANDB_AUTH": "a",
    }
    assert job_environment(env) == {"PATH": "/usr/bin", "PYTHONPATH": "/shared/sk"}


def test_an_element_finds_its_tasks_in_the_recorded_submission(tmp_path: Path) -> None:
    work = JobDir(tmp_path / "w")
    work.create()
    work.record_submission(Submission(executor="slurm", job_id="77", array="0-1", batches=[[0, 1, 2], [5]]))
    assert element_tasks(work, "77", 1) == [5]
    with pytest.raises(StorekitError, match="not a submission"):
        element_tasks(work, "78", 0, wait_s=0)
    with pytest.raises(StorekitError, match="not a submission"):
        element_tasks(work, "77", 2)  # recorded, without that element: no waiting
    assert element_identity({"SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "1"}) == ("77", 1)
    with pytest.raises(StorekitError, match="inside a Slurm array job"):
        element_identity({"SLURM_JOB_ID": "5"})


class FakeTime:
    """A clock that moves only when slept on; `on_sleep` runs at each sleep (the submitter's side)."""

    def __init__(self, on_sleep: Callable[[int], None] = lambda n: None) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        self.on_sleep(len(self.sleeps))


def test_an_element_started_before_its_array_is_recorded_waits_for_the_record(tmp_path: Path) -> None:
    """sbatch returns the id before the submitter writes jobs.json; Slurm may start an element in
    between: it waits for the record instead of failing."""
    work = JobDir(tmp_path / "w")
    work.create()

    def submitter_records(n: int) -> None:
        if n == 3:  # the submitting command gets to it while the element waits
            work.record_submission(
                Submission(executor="slurm", job_id="77", array="0-1", batches=[[0], [4, 5]])
            )

    t = FakeTime(submitter_records)
    said: list[str] = []
    assert element_tasks(work, "77", 1, say=said.append, clock=t.clock, sleep=t.sleep) == [4, 5]
    assert t.sleeps == [0.01, 0.01, 0.01]  # looking often at first: the record is usually close; told once
    assert len(said) == 1 and "waiting up to 60 s" in said[0] and "array 77" in said[0]


def test_an_element_whose_array_is_never_recorded_gives_up_after_the_wait(tmp_path: Path) -> None:
    work = JobDir(tmp_path / "w")
    work.create()
    t = FakeTime()
    with pytest.raises(StorekitError, match="not a submission") as err:
        element_tasks(work, "77", 0, wait_s=600, clock=t.clock, sleep=t.sleep)
    assert 600 <= t.now <= 601 and max(t.sleeps) == 1.0  # at most a second between looks
    assert t.sleeps == sorted(t.sleeps) and len(t.sleeps) < 2500  # slowing down: 30,000 at a steady 10 ms
    assert "did not record it" in (err.value.hint or "")


def test_an_element_of_a_removed_work_dir_fails_at_once(tmp_path: Path) -> None:
    work = JobDir(tmp_path / "w")  # never created, or removed by a finalize
    t = FakeTime()
    with pytest.raises(StorekitError, match="not a submission"):
        element_tasks(work, "77", 0, clock=t.clock, sleep=t.sleep)
    assert t.sleeps == []


def test_slurm_log_dir_takes_the_scripts_and_logs_never_into_the_work_dir(tmp_path: Path) -> None:
    """--slurm-log-dir DIR: scripts and element logs go to DIR/<work dir name>/ (a dry run shows
    where, writing nothing); a DIR that puts them inside the work dir, which finalize removes with
    everything in it, is refused before anything is written (exit 2)."""
    cfg = tmp_path / "storekit.toml"
    cfg.write_text('default_tier = "shared"\n[tiers.shared]\nurl = "./storage"\n')
    (tmp_path / "storage").mkdir()
    write_jsonl(tmp_path / "corpus" / "a.jsonl", sample_records(200))
    logs = tmp_path / "team-logs"
    args = ["prepare", "dataset", "-i", str(tmp_path / "corpus"), "--tokenizer", TOKENIZER, "--name", "w",
            "--executor", "slurm", "--dry-run", "--json", "--config", str(cfg)]  # fmt: skip
    no_slurm = {"PATH": str(Path(sys.executable).parent)}  # a dry run assumes Slurm's limits
    proc = run_storekit([*args, "--slurm-log-dir", str(logs)], env=no_slurm)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    work = Path(doc["plan"]["work_dir"])
    assert doc["slurm"]["log_dir"] == str(logs / work.name)
    assert f"#SBATCH --output={logs / work.name}/%A_%a.out\n" in doc["slurm"]["sbatch"]["array"]
    assert f"--log-dir {logs / work.name} " in doc["slurm"]["sbatch"]["finalize"]
    assert not logs.exists()
    for inside in (work, work.parent):  # DIR/<work dir name> is the work dir itself or below it
        bad = run_storekit([*args, "--slurm-log-dir", str(inside)], env=no_slurm)
        assert bad.returncode == 2, bad.stdout + bad.stderr
        error = json.loads(bad.stdout)["error"]
        assert error["exit_code"] == ExitCode.USAGE and f"inside the work dir {work}" in error["message"]
    assert not logs.exists() and not work.exists()
    with pytest.raises(StorekitError, match="inside the work dir"):
        plan_submission(JobDir(work), [0], job_name="w", log_dir=work / "logs", options=SlurmOptions(),
                        config=None, limits=ClusterLimits(max_array_size=10, max_job_count=100))  # fmt: skip
