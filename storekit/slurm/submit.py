"""Submitting a job's tasks to Slurm: one array (elements within the cluster's limits), then a
finalize job that runs only after every element succeeded (`afterok`).

Works for any job kind on the job layer (storekit/jobs/): the array runs
`storekit jobs run-element WORKDIR` and the finalize job `storekit jobs finalize WORKDIR`. Both
scripts are written under the job's log dir, beside the element logs. The submission (array id,
which tasks each element runs, the finalize id) goes to the work dir's jobs.json, which elements read.

sbatch passes the submitting environment to the job, and Slurm stores it with the script in its
state directory: variables that look like credentials are removed from what sbatch gets; jobs read
S3 credentials from a profile (~/.aws) or the tier's options instead.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from storekit import faults
from storekit.durable import write_file_atomic
from storekit.errors import StorekitError, UsageError
from storekit.jobdir import JobDir, Submission
from storekit.slurm import commands
from storekit.slurm.batches import ClusterLimits, ElementMap, limits_from_config, map_elements
from storekit.slurm.script import JobScript, render
from storekit.slurm.wait import look_interval
from storekit.slurmopts import SlurmOptions

EXECUTOR = "slurm"
# logs/ is the layout's shared area (2775): a job's scripts (no secrets, see script.py) and logs are
# for the team to read, as a training run's logs are
LOG_DIR_MODE = 0o750
SCRIPT_MODE = 0o640
_SECRET_VAR = re.compile(r"(SECRET|PASS|TOKEN|CREDENTIAL|AUTH|_KEY$|_KEY_ID$)", re.IGNORECASE)


@dataclass(frozen=True)
class SubmitPlan:
    """What a submission would do: the scripts and the element map (what --dry-run prints)."""

    job_name: str
    log_dir: Path
    elements: ElementMap
    array_script: str
    finalize_script: str
    limits: ClusterLimits
    options: SlurmOptions
    config: str | None

    @property
    def array_script_path(self) -> Path:
        return self.log_dir / "array.sbatch"

    @property
    def finalize_script_path(self) -> Path:
        return self.log_dir / "finalize.sbatch"


@dataclass(frozen=True)
class Submitted:
    array_job_id: str
    finalize_job_id: str
    plan: SubmitPlan


def storekit_argv(command: Sequence[str], config: str | None) -> list[str]:
    """How a job runs `storekit COMMAND`: with the submitting interpreter (a venv on the shared file
    system) and the submitter's config file."""
    argv = [sys.executable, "-m", "storekit", *command]
    return [*argv, "--config", config] if config else argv


def plan_submission(
    work: JobDir,
    todo: Sequence[int],
    *,
    job_name: str,
    log_dir: Path,
    options: SlurmOptions,
    config: str | None,
    limits: ClusterLimits | None = None,
) -> SubmitPlan:
    """The scripts for `todo`; reads the limits from `scontrol show config` unless given."""
    options.check()
    check_log_dir(log_dir, work.path)
    limits = limits or limits_from_config(commands.show_config())
    elements = map_elements(todo, per_element=options.tasks_per_element, limits=limits)
    array = JobScript(
        job_name=job_name,
        log_dir=str(log_dir),
        command=storekit_argv(["jobs", "run-element", str(work.path)], config),
        array=elements.array_spec,
    )
    return SubmitPlan(
        job_name=job_name,
        log_dir=log_dir,
        elements=elements,
        array_script=render(array, options),
        finalize_script=finalize_script(
            work, job_name=job_name, log_dir=log_dir, options=options, config=config
        ),
        limits=limits,
        options=options,
        config=config,
    )


def check_log_dir(log_dir: Path, work: Path) -> None:
    """Refuse (exit 2, before anything is written) a log dir inside the work dir: finalize removes
    the work dir, and the scripts and element logs with it."""
    if log_dir.resolve().is_relative_to(work.resolve()):
        raise UsageError(
            f"--slurm-log-dir {log_dir.parent}: the logs would go to {log_dir}, inside the work dir "
            f"{work}, which finalize removes",
            hint="give a log dir outside it (default: the tier's logs/)",
        )


def finalize_script(
    work: JobDir, *, job_name: str, log_dir: Path, options: SlurmOptions, config: str | None
) -> str:
    """The finalize job's script: one job, which needs neither the array's CPUs nor its %N."""
    finalize = JobScript(
        job_name=f"fin-{job_name}",  # squeue's NAME shows 8 characters: the role first
        log_dir=str(log_dir),
        command=storekit_argv(["jobs", "finalize", str(work.path), "--log-dir", str(log_dir)], config),
    )
    fin_options = SlurmOptions(
        partition=options.partition,
        time=options.time,
        mem=options.mem,
        mem_per_cpu=options.mem_per_cpu,
        account=options.account,
        qos=options.qos,
        extra=options.extra,
        container=options.container,
        setup=options.setup,
        requeue=options.requeue,
    )
    return render(finalize, fin_options)


def submit(
    work: JobDir,
    plan: SubmitPlan,
    *,
    extra_args: Sequence[str] = (),
    before_record: Callable[[], None] = lambda: None,
    refused: list[bool] | None = None,
    finalize: bool = True,
) -> Submitted:
    """Write both scripts, submit the array, then finalize after it; each id is recorded as soon as
    Slurm gave it, so a failure in between leaves a record `jobs rerun` can complete. With
    `finalize` false only the array goes, and its elements finalize nothing: the submitter does
    (SlurmExecutor.run, as after a local run).

    `before_record` runs between the array's sbatch and its record: the work dir's last writes
    (plan, tokenizer copy) overlap Slurm's scheduling of the array, whose elements wait for the
    record before reading anything. If it fails the array is cancelled: nothing ran yet."""
    made = _missing_dirs(plan.log_dir)
    make_log_dir(plan.log_dir)
    write_file_atomic(plan.array_script_path, plan.array_script.encode(), mode=SCRIPT_MODE)
    if finalize:
        write_file_atomic(plan.finalize_script_path, plan.finalize_script.encode(), mode=SCRIPT_MODE)
    env = job_environment(os.environ)
    try:
        array_id = commands.submit(str(plan.array_script_path), extra_args, env=env)
    except StorekitError:
        _remove_unsubmitted(plan, made)
        if refused is not None:
            refused.append(True)  # nothing was submitted: the caller may remove what it made
        raise
    try:
        faults.point("slurm.array-not-recorded")  # Slurm may start elements before the record: they wait
        before_record()
    except BaseException as exc:
        _cancel_unrecorded(array_id, exc)
        raise
    em = plan.elements
    work.record_submission(
        Submission(
            executor=EXECUTOR,
            job_id=array_id,
            array=em.array_spec,
            batches=[em.tasks_of(e) for e in range(em.elements)],
            submitted=time.time(),
            extra={
                "role": "array",
                "log_dir": str(plan.log_dir),
                "job_name": plan.job_name,
                "options": asdict(plan.options),
                "config": plan.config,
                "extra_args": list(extra_args),
                **({} if finalize else {"finalize": False}),
            },
        )
    )
    faults.point("slurm.array-submitted")
    if not finalize:
        return Submitted(array_job_id=array_id, finalize_job_id="", plan=plan)
    after = [f"--dependency=afterok:{array_id}", "--kill-on-invalid-dep=yes", *extra_args]
    finalize_id = commands.submit(str(plan.finalize_script_path), after, env=env)
    _record_finalize(work, finalize_id, after=array_id, log_dir=plan.log_dir)
    return Submitted(array_job_id=array_id, finalize_job_id=finalize_id, plan=plan)


def _missing_dirs(path: Path) -> list[Path]:
    """`path` and those of its parents that do not exist yet, deepest first."""
    missing = []
    while not path.exists() and path.parent != path:
        missing.append(path)
        path = path.parent
    return missing


def _remove_unsubmitted(plan: SubmitPlan, made: Sequence[Path]) -> None:
    """sbatch refused the array: nothing was submitted, so neither its scripts nor the log dirs this
    submission made stay behind (a log dir that holds anything else is kept)."""
    for script in (plan.array_script_path, plan.finalize_script_path):
        with contextlib.suppress(FileNotFoundError):
            script.unlink()
    for directory in made:
        try:
            directory.rmdir()
        except OSError:
            return


def _cancel_unrecorded(array_id: str, cause: BaseException) -> None:
    """scancel an array submitted but not recorded (its elements are still waiting for the record);
    if that fails too, the hint of the error on its way up names the array to cancel by hand."""
    try:
        commands.cancel([array_id])
    except StorekitError as exc:
        if isinstance(cause, StorekitError):
            more = f"cancel array {array_id} with scancel (it failed here: {exc.message})"
            cause.hint = f"{cause.hint}; {more}" if cause.hint else more


def submit_finalize(work: JobDir, script: str, log_dir: Path, *, extra_args: Sequence[str] = ()) -> str:
    """A lone finalize job (every task is done, the array's finalize job failed or was cancelled)."""
    make_log_dir(log_dir)
    path = log_dir / "finalize.sbatch"
    write_file_atomic(path, script.encode(), mode=SCRIPT_MODE)
    job_id = commands.submit(str(path), extra_args, env=job_environment(os.environ))
    _record_finalize(work, job_id, after=None, log_dir=log_dir)
    return job_id


def _record_finalize(work: JobDir, job_id: str, *, after: str | None, log_dir: Path) -> None:
    """The finalize job in the work dir's submissions: after the array `after`, or on its own."""
    work.record_submission(
        Submission(
            executor=EXECUTOR,
            job_id=job_id,
            submitted=time.time(),
            extra={"role": "finalize", "after": after, "log_dir": str(log_dir)},
        )
    )


def make_log_dir(log_dir: Path) -> None:
    log_dir.mkdir(parents=True, exist_ok=True, mode=LOG_DIR_MODE)
    with contextlib.suppress(OSError):  # an existing one of ours (a rerun) opens up too
        os.chmod(log_dir, (log_dir.stat().st_mode & 0o7000) | LOG_DIR_MODE)


def job_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The submitting environment without anything that looks like a credential."""
    return {k: v for k, v in env.items() if not _SECRET_VAR.search(k)}


# sbatch gives the array id before the submitting command has written the plan's last parts and the
# record to jobs.json (on purpose: they overlap Slurm's scheduling), and a slow fsync on a shared file
# system or a busy login node can stretch that: an element that does not find its submission waits
# this long for it before giving up, looking as `--slurm-wait` looks for the end (every 10 ms at
# first: the record usually lands within a fraction of a second, and a look missed is time lost)
RECORD_WAIT_S = 60.0


def element_tasks(
    work: JobDir,
    array_job_id: str,
    element: int,
    *,
    wait_s: float = RECORD_WAIT_S,
    say: Callable[[str], None] = lambda line: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[int]:
    """The plan tasks array element `element` of submission `array_job_id` runs (from jobs.json);
    a submission not recorded yet is waited for, up to `wait_s` seconds."""
    started = clock()
    deadline, waiting = started + wait_s, False
    while True:
        sub = next(
            (s for s in work.submissions() if s.executor == EXECUTOR and s.job_id == array_job_id), None
        )
        if sub is not None:
            if sub.batches is None:
                return [element]
            if 0 <= element < len(sub.batches):
                return list(sub.batches[element])
            break
        now = clock()
        if now >= deadline or not work.path.is_dir():
            break
        if not waiting:
            waiting = True
            say(
                f"element {array_job_id}_{element}: waiting up to {wait_s:.0f} s for the submitting "
                f"command to record array {array_job_id} in {work.path} (it writes the plan after "
                "sbatch)"
            )
        faults.point("slurm.element-awaits-record")
        sleep(look_interval(now - started))
    raise StorekitError(
        f"array element {array_job_id}_{element} is not a submission of {work.path}",
        hint="the submitting command did not record it (was it killed?) or the work dir was replaced "
        "after submitting; cancel the job (scancel) and submit again",
    )
