"""Job work dir records: the plan and its digest, completion records that appear whole (a kill
before the rename leaves none), failure records, submissions, and scans that list, never stat."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from storekit.errors import MismatchError, NotFoundError
from storekit.jobdir import JobDir, Submission
from storekit.jobs.run import run_tasks
from storekit.jobs.status import job_status, parse_ranges, ranges
from storekit.liveness import process_start
from tests.conftest import storekit_env
from tests.unit.jobs import echo_job

KILL_AT_COMMIT = """
import sys
from pathlib import Path
from tests.unit.jobs import echo_job
from storekit.executors.base import load_job
job = load_job(Path(sys.argv[1]), None)
job.runner(lambda: False).run(int(sys.argv[2]), lambda *a: None, lambda *a: None)
"""


def _run_one(work: JobDir, index: int, faults: str | None) -> subprocess.CompletedProcess[str]:
    env = storekit_env({"STOREKIT_FAULTS": faults} if faults else {})
    return subprocess.run(
        [sys.executable, "-c", KILL_AT_COMMIT, str(work.path), str(index)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_plan_is_checked_against_its_digest(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", [10, 20, 30])
    header = work.header()
    assert (header.kind, header.tasks, header.meta) == ("test-echo", 3, {"output": "echo"})
    assert json.loads(work.read_plan()) == {"sizes": [10, 20, 30], "fail": []}
    assert os.stat(work.path).st_mode & 0o777 == 0o700
    work.plan_file.write_bytes(work.plan_file.read_bytes().replace(b"30", b"31"))
    with pytest.raises(MismatchError, match=r"plan\.json: differs from the digest"):
        work.read_plan()
    with pytest.raises(NotFoundError, match="not a job work dir"):
        JobDir(tmp_path).header()


def test_kill_between_temp_write_and_rename_leaves_no_record(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", [100, 100])
    killed = _run_one(work, 1, "jobs.before-commit=kill")
    assert killed.returncode == -9, killed.stderr
    scan = work.scan()
    assert scan.done == frozenset()
    (flying,) = scan.in_flight  # the temp dir, named for the dead run
    assert flying.index == 1 and flying.pid > 0
    assert (work.tasks / flying.name / "out.bin").read_bytes() == echo_job.payload(1, 100)
    st = job_status(work)
    assert st.states == {"done": [], "running": [], "failed": [], "pending": [0, 1]}  # its run is dead
    ok = _run_one(work, 1, None)
    assert ok.returncode == 0, ok.stderr
    assert work.scan().done == {1}
    record = work.read_done(1)
    work.check_parts(1, record)
    assert (work.task_dir(1) / "out.bin").read_bytes() == echo_job.payload(1, 100)


def test_tampered_part_is_a_mismatch(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", [64])
    assert _run_one(work, 0, None).returncode == 0
    part = work.task_dir(0) / "out.bin"
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(MismatchError, match=r"out\.bin: differs from the task"):
        work.check_parts(0, work.read_done(0))


def test_failure_record_then_success_wins(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", [1, 1, 1])
    work.record_failure(2, "input.jsonl:3: malformed json", exit_code=1, log="/logs/job_7_2.out")
    st = job_status(work)
    assert st.states["failed"] == [2] and st.states["pending"] == [0, 1]
    failure = st.failures[2]
    assert failure["error"] == "input.jsonl:3: malformed json" and failure["exit_code"] == 1
    assert failure["log"] == "/logs/job_7_2.out" and failure["pid"] == os.getpid() and failure["host"]
    assert not [p for p in work.failed.iterdir() if ".storekit-tmp-" in p.name]
    assert _run_one(work, 2, None).returncode == 0
    assert job_status(work).states["done"] == [2]  # a completion record outranks an old failure


def test_scan_lists_twice_and_never_stats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = echo_job.make(tmp_path / "job", [1] * 300)
    for i in range(0, 300, 2):
        work.task_dir(i).mkdir()
    for i in (1, 3):
        work.record_failure(i, "boom", exit_code=1)
    calls: list[str] = []
    real_listdir, real_stat = os.listdir, os.stat
    monkeypatch.setattr(os, "listdir", lambda p: calls.append("listdir") or real_listdir(p))
    monkeypatch.setattr(os, "stat", lambda *a, **k: calls.append("stat") or real_stat(*a, **k))
    scan = work.scan()
    assert calls == ["listdir", "listdir"]
    assert scan.done == set(range(0, 300, 2)) and scan.failed == {1, 3}


def test_own_temps_only_spares_other_runs(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", [1, 1])
    mine = work.new_task_dir(0)
    other = JobDir(work.path)
    other.run_tag = "4242@node17"
    theirs = other.new_task_dir(1)
    work.remove_temps(own=True)
    assert not mine.exists() and theirs.is_dir()
    (flying,) = work.scan().in_flight
    assert (flying.index, flying.pid, flying.host) == (1, 4242, "node17")
    assert job_status(work).running == {1: "pid 4242 on node17"}  # another node: the scheduler knows
    work.remove_temps()
    assert not theirs.exists()


def test_run_tasks_reclaims_the_temps_of_dead_runs_only(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", [100, 100, 100])
    assert _run_one(work, 1, "jobs.before-commit=kill").returncode == -9  # a dead run on this host
    other = JobDir(work.path)
    other.run_tag = "4242@node17"
    theirs = other.new_task_dir(2)  # another node's: only its scheduler knows whether it lives
    mine = work.new_task_dir(2)  # this process: alive
    assert len(work.scan().in_flight) == 3
    run_tasks(work.path, [0], None, workers=1)
    scan = work.scan()
    assert scan.done == {0} and {f.name for f in scan.in_flight} == {theirs.name, mine.name}
    assert not [n for n in os.listdir(work.tasks) if n not in {"000000", theirs.name, mine.name}]


def test_a_dead_runs_pid_reused_by_a_live_process_is_still_dead(tmp_path: Path) -> None:
    """After a pid wrap the dead run's pid can name a live process: its start time tells them apart
    (this flaked in CI: a SIGKILLed prepare's temp dir survived run-task)."""
    work = echo_job.make(tmp_path / "job", [1, 1, 1])
    reused = JobDir(work.path)
    pid = os.getpid()  # alive, but not the run that wrote the temp dir: another start time
    reused.run_tag = f"{pid}-{int(process_start(pid) or 0) + 1}@{socket.gethostname()}"
    stale = reused.new_task_dir(1)
    legacy = JobDir(work.path)
    legacy.run_tag = f"{pid}@{socket.gethostname()}"  # no start time (an older storekit): pid only
    kept = legacy.new_task_dir(2)
    (one, two) = sorted(work.scan().in_flight, key=lambda f: f.index)
    assert (one.pid, two.pid, two.pid_start) == (pid, pid, None) and one.pid_start is not None
    assert job_status(work).states["running"] == [2]
    assert work.remove_dead_temps() == 1
    assert not stale.exists() and kept.is_dir()


def test_a_live_run_on_this_host_is_running(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", [1, 1, 1])
    work.new_task_dir(2)
    st = job_status(work)
    assert st.states == {"done": [], "running": [2], "failed": [], "pending": [0, 1]}
    assert st.to_dict()["running"] == [{"task": 2, "by": f"pid {os.getpid()} on {socket.gethostname()}"}]


def test_submissions_accumulate(tmp_path: Path) -> None:
    work = echo_job.make(tmp_path / "job", [1] * 4)
    work.record_submission(Submission("slurm", "101", array="0-1%2", batches=[[0, 1], [2, 3]]))
    work.record_submission(Submission("slurm", "102", array="1", batches=[[2, 3]]))
    subs = work.submissions()
    assert [(s.job_id, s.array, s.batches) for s in subs] == [
        ("101", "0-1%2", [[0, 1], [2, 3]]),
        ("102", "1", [[2, 3]]),
    ]
    assert job_status(work).to_dict()["submissions"][1]["job_id"] == "102"


@pytest.mark.parametrize(
    ("indexes", "text"),
    [([], ""), ([4], "4"), ([0, 1, 2, 5, 7, 8], "0-2,5,7-8"), (list(range(10000)), "0-9999")],
)
def test_ranges_round_trip(indexes: list[int], text: str) -> None:
    assert ranges(indexes) == text
    if text:
        assert parse_ranges(text) == indexes


@pytest.mark.parametrize("bad", ["", "a", "3-1", "-2", "1,,2"])
def test_bad_ranges_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_ranges(bad)
