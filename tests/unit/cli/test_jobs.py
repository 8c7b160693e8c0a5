"""`storekit jobs status`, `jobs run-task` and `jobs finalize` on a real prepare work dir: a killed
run's tasks are finished by run-task and published by finalize (as Slurm elements and the afterok job
would), and the dataset is byte-identical to an uninterrupted local run."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from storekit import faults
from tests.conftest import run_in_process, start_storekit
from tests.integration.s3_helpers import wait_for
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, tree_bytes, write_jsonl

ARGS = [
    "prepare",
    "dataset",
    "-i",
    "in/a.jsonl",
    "--tokenizer",
    TOKENIZER,
    "--name",
    "jb",
    "--json",
    "--quiet",
]
ARGS += ["--workers", "1", "--shard-size", "32KiB", "--task-size", "16KiB"]
DATASET = "datasets/text/jb/v1"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jobs")
    write_jsonl(root / "in" / "a.jsonl", sample_records(limit_bytes=100_000, max_doc=20_000))
    return root


@pytest.mark.slow
def test_status_and_run_task_finish_a_killed_prepare(corpus: Path) -> None:
    try:
        clean = run_in_process(ARGS, cwd=corpus)
        assert clean.returncode == 0, clean.stderr
        baseline = tree_bytes(corpus / "storage" / DATASET)
        shutil.rmtree(corpus / "storage")
        killed = start_storekit(ARGS, cwd=corpus, env={faults.ENV: "prepare.task-done@2=kill"})
        killed.communicate(timeout=180)
        assert killed.returncode == -signal.SIGKILL
        (work,) = (corpus / "storage" / "scratch").glob("storekit-prepare-jb-v1-*")

        res = run_in_process(["jobs", "status", DATASET, "--json"], cwd=corpus)
        assert res.returncode == 0, res.stderr
        (job,) = json.loads(res.stdout)["jobs"]
        total = job["tasks"]
        assert total >= 4 and job["kind"] == "prepare" and job["work_dir"] == str(work)
        assert job["counts"] == {"done": 2, "running": 0, "failed": 0, "pending": total - 2}
        assert job["complete"] is False

        early = run_in_process(["jobs", "finalize", str(work), "--json"], cwd=corpus)
        assert early.returncode == 1 and "tasks are not done" in early.stderr
        assert not (corpus / "storage" / DATASET).exists()  # nothing published with tasks missing

        every = ["jobs", "run-task", str(work), "--task-ids", f"0-{total - 1}", "--json"]
        kept, run_task_pid = _preempted_run_task([*every, "--workers", "1"], corpus)
        assert kept == 3  # the task finished before the signal stays, the one claimed after goes
        # ... and the SIGKILLed prepare's temp dirs (a dead pid on this host) were reclaimed
        left = sorted(p.name for p in work.glob("tasks/.*storekit-tmp-*"))
        assert not left, (
            f"left {left}; killed prepare pid {killed.pid}, run-task pid {run_task_pid}, "
            f"tasks/ {sorted(os.listdir(work / 'tasks'))}"
        )
        ran = run_in_process(every, cwd=corpus)
        assert ran.returncode == 0, ran.stderr
        assert json.loads(ran.stdout)["run"] == total - kept and json.loads(ran.stdout)["skipped"] == kept
        res = run_in_process(["jobs", "status", str(work), "--json"], cwd=corpus)
        assert json.loads(res.stdout)["jobs"][0]["complete"] is True

        fin = run_in_process(["jobs", "finalize", str(work), "--json"], cwd=corpus)
        assert fin.returncode == 0, fin.stderr
        assert json.loads(fin.stdout)["status"] == "prepared"
        assert tree_bytes(corpus / "storage" / DATASET) == baseline  # as the uninterrupted local run
        assert not work.exists()
        assert json.loads(run_in_process(["jobs", "status", "--json"], cwd=corpus).stdout)["jobs"] == []
        rerun = run_in_process(ARGS, cwd=corpus)
        assert rerun.returncode == 0, rerun.stderr
        assert json.loads(rerun.stdout)["status"] == "unchanged"
    finally:
        shutil.rmtree(corpus / "storage", ignore_errors=True)


def _preempted_run_task(args: list[str], cwd: Path) -> tuple[int, int]:
    """Run-task stopped by Slurm's preemption notice while one task is done and the next claimed
    (held there by a fault point until the stop is under way); returns the tasks then done."""
    events = cwd / "events"
    events.mkdir()
    try:
        held = {
            faults.ENV: "executor.task-claimed@2=pause,executor.stopping=pause",
            faults.DIR_ENV: str(events),
        }
        proc = start_storekit(args, cwd=cwd, env=held)
        wait_for("the second task claimed", (events / "executor.task-claimed.reached").exists)
        proc.send_signal(signal.SIGUSR1)
        wait_for("the stop under way", (events / "executor.stopping.reached").exists)
        (events / "executor.task-claimed.go").touch()
        (events / "executor.stopping.go").touch()
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert json.loads(out)["error"]["exit_code"] == 130
        return len(list(cwd.glob("storage/scratch/*/tasks/[0-9]*"))), proc.pid
    finally:
        shutil.rmtree(events)


def test_failed_task_is_named_with_its_error(corpus: Path) -> None:
    bad = corpus / "bad"
    try:
        write_jsonl(bad / "in" / "a.jsonl", sample_records(limit_bytes=40_000))
        with open(bad / "in" / "a.jsonl", "ab") as fh:
            fh.write(b'{"text": "unterminated\n')
        res = run_in_process([*ARGS, "--on-error", "fail"], cwd=bad)
        assert res.returncode == 1, res.stderr
        status = run_in_process(["jobs", "status", DATASET, "--json"], cwd=bad)
        (job,) = json.loads(status.stdout)["jobs"]
        assert job["counts"]["failed"] == 1
        (failure,) = job["failed"]
        assert failure["exit_code"] == 1 and "a.jsonl:" in failure["error"]
        assert failure["task"] == job["tasks"] - 1  # the bad record is the last line
        human = run_in_process(["jobs", "status", DATASET], cwd=bad)
        assert f"{job['tasks']} tasks" in human.stdout and "1 failed" in human.stdout
    finally:
        shutil.rmtree(bad, ignore_errors=True)


def test_unknown_target_and_bad_tasks(tmp_path: Path) -> None:
    res = run_in_process(["jobs", "status", "datasets/text/nope/v1", "--json"], cwd=tmp_path)
    assert res.returncode == 3 and json.loads(res.stdout)["error"]["exit_code"] == 3
    res = run_in_process(["jobs", "run-task", str(tmp_path), "--task-ids", "2-1"], cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("error: --task-ids")
    res = run_in_process(["jobs", "run-task", str(tmp_path), "--task-ids", "1"], cwd=tmp_path)
    assert res.returncode == 3 and "not a job work dir" in res.stderr


def test_status_shows_one_row_per_error_and_log_whole_in_a_pipe(tmp_path: Path) -> None:
    """Failed tasks with the same error and log are one row (their task ranges); --tasks lists each;
    piped, a row is one line with the whole log path (no table wrapping at 80 columns)."""
    from tests.unit.jobs import echo_job

    work = echo_job.make(tmp_path / "job", [10] * 6, threads_per_process=1)
    log = str(
        tmp_path / "a-rather-long-directory-name-for-logs" / "storekit-prepare-web-v1-0123" / "77_1.out"
    )
    for task in (1, 2, 3, 5):
        work.record_failure(task, "bad input: /corpus/c.jsonl line 1", exit_code=1, log=log)
    grouped = run_in_process(["jobs", "status", str(work.path)])
    assert grouped.returncode == 0, grouped.stderr
    rows = [line for line in grouped.stdout.splitlines() if log in line]
    assert rows == [
        f"  tasks 1-3,5: exit 1 on {rows[0].split(' on ')[1].split(':')[0]}: bad input: "
        f"/corpus/c.jsonl line 1 (log: {log})"
    ], grouped.stdout
    each = run_in_process(["jobs", "status", str(work.path), "--tasks"])
    spans = [ln.split(":")[0].strip() for ln in each.stdout.splitlines() if log in ln]
    assert spans == ["tasks 1", "tasks 2", "tasks 3", "tasks 5"], each.stdout
