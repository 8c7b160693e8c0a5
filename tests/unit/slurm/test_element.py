"""An element's CPUs come from Slurm; requeueing outside a job is refused."""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from storekit import faults
from storekit.errors import ExitCode, Interrupted, StorekitError
from storekit.executors.base import default_workers
from storekit.jobdir import Submission
from storekit.slurm.element import element_workers, own_job_id, requeue_self
from storekit.slurm.element_entry import fast_args
from storekit.slurm.run import run_element
from storekit.slurmopts import SlurmOptions
from tests.conftest import run_storekit
from tests.unit.jobs import echo_job


def test_workers_follow_slurm_cpus_per_task_not_the_host() -> None:
    assert element_workers({"SLURM_CPUS_PER_TASK": "1"}) == 1
    assert element_workers({"SLURM_CPUS_PER_TASK": "999"}) == default_workers()  # never more
    assert element_workers({}) == default_workers()
    assert element_workers({"SLURM_CPUS_PER_TASK": "0"}) == default_workers()
    # no --cpus-per-task: what Slurm allocated on this node, not the node's cores (task/none)
    assert element_workers({"SLURM_CPUS_ON_NODE": "1"}) == 1


def test_requeue_needs_a_job_and_then_ignores_further_stop_signals() -> None:
    assert own_job_id({"SLURM_JOB_ID": "42"}) == "42"
    # an element is named ARRAYID_INDEX: the bare id of the element whose JobId equals the array's
    # names the whole array, and `scontrol requeue` would requeue every element of it
    element = {"SLURM_JOB_ID": "42", "SLURM_ARRAY_JOB_ID": "42", "SLURM_ARRAY_TASK_ID": "3"}
    assert own_job_id(element) == "42_3"
    old = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
    try:
        with pytest.raises(StorekitError, match="not inside a Slurm job"):
            requeue_self({})
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def test_process_age_counts_from_the_process_start() -> None:
    import subprocess
    import sys
    import time

    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", "from storekit.slurm.element import process_age; print(process_age())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    elapsed = time.monotonic() - started
    assert 0.0 <= float(out) <= elapsed + 0.02  # /proc counts in clock ticks (10 ms)


def test_the_element_command_skips_the_cli_and_fails_as_the_cli_does(tmp_path: Path) -> None:
    """What the sbatch script runs loads no Typer/Click/Rich; other argument shapes take the CLI."""
    assert fast_args(["/w"]) == ("/w", None)
    assert (
        fast_args(["/w", "--config", "/c.toml"]) == fast_args(["--config=/c.toml", "/w"]) == ("/w", "/c.toml")
    )
    assert fast_args(["/w", "--json"]) is None and fast_args(["--help"]) is None and fast_args([]) is None
    env = {"PYTHONPROFILEIMPORTTIME": "1", "SLURM_ARRAY_JOB_ID": "", "SLURM_ARRAY_TASK_ID": ""}
    fast = run_storekit(["jobs", "run-element", str(tmp_path)], env=env)
    full = run_storekit(["jobs", "run-element", str(tmp_path), "--json"], env=env)
    for ran in (fast, full):  # outside an array element: one line, exit 1, either way
        assert ran.returncode == 1 and "error: jobs run-element runs inside a Slurm array job" in ran.stderr
    assert not re.search(r"\| +(typer|click|rich)$", fast.stderr, re.MULTILINE), fast.stderr
    assert re.search(r"\| +typer$", full.stderr, re.MULTILINE)


@pytest.fixture
def keep_signal_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_usr1_to_an_element_submitted_with_no_requeue_stops_it_and_asks_slurm_nothing(
    tmp_path: Path, keep_signal_handlers: None
) -> None:
    """--slurm-no-requeue: a USR1 (sent by hand: the script asks for no notice) stops the element as
    TERM does (exit 130, finished tasks kept) and says why; it does not ask Slurm for a requeue that
    Slurm refuses for such a job (the error then read 'could not requeue job ...')."""
    work = echo_job.make(tmp_path / "job", [10] * 4, threads_per_process=1)
    options = asdict(SlurmOptions(requeue=False))
    work.record_submission(
        Submission(executor="slurm", job_id="77", array="0-1", batches=[[0, 1], [2, 3]],
                   extra={"options": options})
    )  # fmt: skip
    taken = threading.Event()

    def usr1_arrives() -> None:  # at the first task's claim; it waits until the main thread took it
        if not taken.is_set():
            signal.raise_signal(signal.SIGUSR1)
            taken.wait(30)

    env = {"SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "0", "SLURM_CPUS_PER_TASK": "1"}
    with (
        faults.at("executor.task-claimed", usr1_arrives),
        faults.at("executor.stopping", taken.set),
        pytest.raises(Interrupted) as caught,
    ):
        run_element(work.path, None, env=env, say=lambda line: None)
    message = caught.value.message
    assert "element 77_0: stopped by SIGUSR1" in message and "--slurm-no-requeue" in message, message
    assert "could not requeue" not in message and caught.value.exit_code == ExitCode.INTERRUPTED
    assert not work.is_done(1) and signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN
