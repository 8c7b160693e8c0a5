"""The sbatch script: the admins' options, an exec'd storekit, no secret, stable bytes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from storekit.errors import ExitCode, StorekitError
from storekit.slurm.script import JobScript, notice_signal, render, sbatch_line
from storekit.slurmopts import SlurmOptions

COMMAND = [
    "/venv/bin/python",
    "-m",
    "storekit",
    "jobs",
    "run-element",
    "/shared/work dir",
    "--submission",
    "0",
]


def test_every_option_becomes_its_sbatch_line_and_storekit_is_execed() -> None:
    opts = SlurmOptions(
        partition="cpu",
        time="2:00:00",
        cpus_per_task=8,
        mem="16G",
        max_concurrent=50,
        account="proj1",
        qos="low",
        extra=("--constraint=skylake", "--exclusive"),
        container="apptainer exec /images/sk.sif",
        setup="module load python/3.11",
    )
    text = render(
        JobScript(job_name="storekit-web", log_dir="/shared/logs", command=COMMAND, array="0-41"), opts
    )
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    for want in ("--job-name=storekit-web", "--array=0-41%50", "--output=/shared/logs/%A_%a.out",
                 "--partition=cpu", "--time=2:00:00", "--cpus-per-task=8", "--mem=16G", "--account=proj1",
                 "--qos=low", "--constraint=skylake", "--exclusive", "--requeue", "--signal=B:USR1@90",
                 "--open-mode=append"):  # fmt: skip
        assert f"#SBATCH {want}" in lines, want
    # every #SBATCH line comes before the first command (sbatch stops reading them there)
    first_command = next(i for i, ln in enumerate(lines) if ln and not ln.startswith("#"))
    assert all(not ln.startswith("#SBATCH") for ln in lines[first_command:])
    assert lines[-2] == "module load python/3.11"
    assert lines[-1] == (
        "exec apptainer exec /images/sk.sif /venv/bin/python -m storekit jobs run-element "
        "'/shared/work dir' --submission 0"
    )
    # the same inputs give the same bytes (a resubmission can compare)
    assert text == render(JobScript(job_name="storekit-web", log_dir="/shared/logs", command=COMMAND,
                                    array="0-41"), opts)  # fmt: skip


def test_a_single_job_logs_by_job_id_and_defaults_add_no_lines() -> None:
    text = render(JobScript(job_name="fin", log_dir="/l", command=["storekit"]), SlurmOptions())
    assert "#SBATCH --output=/l/%j.out" in text
    assert "--array" not in text and "--partition" not in text and "--mem" not in text
    assert text.endswith("exec storekit\n")


def test_the_script_parses_in_bash() -> None:
    text = render(JobScript(job_name="x", log_dir="/l", command=COMMAND, array="0-3"),
                  SlurmOptions(setup="export A=1"))  # fmt: skip
    proc = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("opts", "words"),
    [
        (SlurmOptions(time="two hours"), "--slurm-time"),
        (SlurmOptions(mem="lots"), "--slurm-mem"),
        (SlurmOptions(partition="cpu;rm -rf /"), "--slurm-partition"),
        (SlurmOptions(cpus_per_task=0), "--slurm-cpus"),
        (SlurmOptions(extra=("constraint=x",)), "--slurm-extra"),
        (SlurmOptions(extra=("--a\n--b",)), "--slurm-extra"),
        (SlurmOptions(setup="export AWS_SECRET_ACCESS_KEY=abc"), "credential"),
        (SlurmOptions(setup="echo a\necho b"), "one line"),
        (SlurmOptions(extra=("--array=0-1",)), "storekit sets --array itself"),
        (SlurmOptions(extra=("-o",)), "storekit sets -o itself"),
        (SlurmOptions(extra=("--output=/x/%j.out",)), "storekit sets --output itself"),
        (SlurmOptions(extra=("-J x",)), "storekit sets -J itself"),
        (SlurmOptions(extra=("--dependency=afterok:1",)), "storekit sets --dependency itself"),
        (SlurmOptions(mem="1G", mem_per_cpu="1G"), "give one"),
        (SlurmOptions(dependency="after ok"), "--slurm-dependency"),
        (SlurmOptions(job_name="my job"), "--slurm-job-name"),
    ],
)
def test_bad_options_are_refused_before_anything_is_written(opts: SlurmOptions, words: str) -> None:
    with pytest.raises(StorekitError) as info:
        opts.check()
    assert info.value.exit_code == ExitCode.USAGE
    assert words in info.value.message


def test_the_time_limit_notice_never_comes_at_the_start_of_a_short_limit() -> None:
    """USR1 90 s before the limit; under 6 minutes a quarter of it: a limit of 1 minute signalled at
    -90 s would come at the element's start, and each requeued run would be requeued again."""
    assert notice_signal(None) == notice_signal("2:00:00") == notice_signal("6") == "B:USR1@90"
    assert notice_signal("1") == "B:USR1@15" and notice_signal("0:30") == "B:USR1@10"
    assert notice_signal("0-0:04:00") == "B:USR1@60"


def test_an_extra_option_with_spaces_is_quoted_for_sbatch() -> None:
    assert sbatch_line(" --comment=my job ") == '--comment="my job"'
    assert sbatch_line("--constraint=a&b") == "--constraint=a&b"


def test_no_requeue_asks_for_no_time_limit_notice() -> None:
    """The notice (USR1 before the limit) is how an element requeues itself; with --slurm-no-requeue
    Slurm would refuse that, so the limit ends the element as Slurm says it: TIMEOUT."""
    job = JobScript(job_name="x", log_dir="/l", command=COMMAND, array="0-3")
    text = render(job, SlurmOptions(time="2:00:00", requeue=False))
    assert "#SBATCH --no-requeue\n" in text and "--signal" not in text and "#SBATCH --requeue" not in text
    assert "#SBATCH --signal=B:USR1@90\n" in render(job, SlurmOptions(time="2:00:00"))


def test_the_job_makes_its_own_log_group_readable_whatever_the_submitters_umask(tmp_path: Path) -> None:
    """Slurm creates %A_%a.out / %j.out with the submitter's umask (0600 under 077); the script's
    first command opens it to the group, as the scripts beside it in logs/ are (0640)."""
    logs = tmp_path / "team logs"
    logs.mkdir()
    for array, name, env in (("0-3", "5_2.out", {"SLURM_ARRAY_JOB_ID": "5", "SLURM_ARRAY_TASK_ID": "2"}),
                             (None, "9.out", {"SLURM_JOB_ID": "9"})):  # fmt: skip
        log = logs / name
        log.touch(mode=0o600)
        os.chmod(log, 0o600)
        text = render(
            JobScript(job_name="x", log_dir=str(logs), command=["true"], array=array), SlurmOptions()
        )
        lines = text.splitlines()
        chmod = next(ln for ln in lines if ln.startswith("chmod "))
        assert lines.index(chmod) < len(lines) - 1 and lines[-1] == "exec true"
        done = subprocess.run(["bash", "-euc", chmod], env={"PATH": os.environ["PATH"], **env})
        assert done.returncode == 0 and log.stat().st_mode & 0o777 == 0o640, oct(log.stat().st_mode)
    gone = render(JobScript(job_name="x", log_dir=str(tmp_path / "none"), command=["true"]), SlurmOptions())
    line = next(ln for ln in gone.splitlines() if ln.startswith("chmod "))
    assert (
        subprocess.run(
            ["bash", "-euc", line], env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "1"}
        ).returncode
        == 0
    )
