"""The sbatch script of a job array: the options admins set, and one `exec storekit ...` line.

The script is written under the job's `logs/` beside the element logs and is stored by Slurm in its
state directory, so it must hold no secret: only options, paths and the command. The command is
`exec`ed so `--signal=B:USR1@90` (delivered to the batch shell) reaches storekit itself.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from storekit.errors import UsageError

PREEMPT_SIGNAL = "B:USR1@90"  # 90 s before the time limit, to the batch step's process
_TIME = re.compile(r"^(\d+|\d+:\d{2}(:\d{2})?|\d+-\d+(:\d{2}(:\d{2})?)?)$")
_MEM = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)
_NAME = re.compile(r"^[\w.+-]+$")
_SECRETISH = re.compile(r"(secret|password|passwd|token|credential|aws_access_key)", re.IGNORECASE)
_DEPENDENCY = re.compile(r"^(singleton|[a-z]+(:[0-9_+*]+)+)([,?](singleton|[a-z]+(:[0-9_+*]+)+))*$")
# what storekit sets itself in every script: --slurm-extra may not set it again (a second --array
# line, logs where failure records do not look, a dependency replacing finalize's afterok)
OWN_OPTIONS = {
    "--array": "--slurm-max-concurrent/--slurm-tasks-per-element",
    "-a": "--slurm-max-concurrent/--slurm-tasks-per-element",
    "--output": "--slurm-log-dir",
    "-o": "--slurm-log-dir",
    "--error": "--slurm-log-dir",
    "-e": "--slurm-log-dir",
    "--dependency": "--slurm-dependency",
    "-d": "--slurm-dependency",
    "--job-name": "--slurm-job-name",
    "-J": "--slurm-job-name",
    "--requeue": "--slurm-no-requeue",
    "--no-requeue": "--slurm-no-requeue",
    "--open-mode": "nothing (logs are appended to)",
    "--signal": "nothing (USR1 90 s before the time limit is how an element requeues itself)",
}


@dataclass(frozen=True, kw_only=True)
class SlurmOptions:
    """What `--slurm-*` options give; None means Slurm's (or the site's) default."""

    partition: str | None = None
    time: str | None = None  # Slurm time limit per array element: MM, HH:MM:SS, D-HH[:MM[:SS]]
    cpus_per_task: int | None = None
    mem: str | None = None  # per array element, e.g. 8G
    tasks_per_element: int = 1  # plan tasks each array element runs (raised to fit MaxArraySize)
    max_concurrent: int | None = None  # the array's %N
    account: str | None = None
    qos: str | None = None
    extra: tuple[str, ...] = ()  # further #SBATCH lines, e.g. "--constraint=skylake"
    container: str | None = None  # prefix of the command, e.g. "apptainer exec /images/sk.sif"
    setup: str | None = None  # a shell line run first, e.g. "module load python/3.11"
    job_name: str | None = None  # the array's name (the finalize job's: fin-NAME)
    log_dir: str | None = None  # scripts and logs go to LOG_DIR/<work dir name>/
    mem_per_cpu: str | None = None
    dependency: str | None = None  # the array starts after this, e.g. afterok:123
    requeue: bool = True  # False: --no-requeue and no USR1 notice (the limit: TIMEOUT; `jobs rerun`)
    extra_sbatch_args: tuple[str, ...] = field(default=())  # command-line only (tests: --nodelist)

    def check(self) -> None:
        """Refuse (exit 2) what would make a broken script, before anything is written."""
        if self.time is not None and not _TIME.match(self.time):
            raise UsageError(f"--slurm-time {self.time!r}: expected MM, HH:MM:SS or D-HH:MM")
        for flag, mem in (("--slurm-mem", self.mem), ("--slurm-mem-per-cpu", self.mem_per_cpu)):
            if mem is not None and not _MEM.match(mem):
                raise UsageError(f"{flag} {mem!r}: expected a number with K, M, G or T, e.g. 8G")
        if self.mem is not None and self.mem_per_cpu is not None:
            raise UsageError("--slurm-mem and --slurm-mem-per-cpu: give one (sbatch refuses both)")
        if self.dependency is not None and not _DEPENDENCY.match(self.dependency):
            raise UsageError(
                f"--slurm-dependency {self.dependency!r}: expected TYPE:JOBID[:JOBID...], e.g. afterok:123"
            )
        names = {
            "--slurm-job-name": self.job_name,
            "--slurm-partition": self.partition,
            "--slurm-account": self.account,
            "--slurm-qos": self.qos,
        }
        for name, value in names.items():
            if value is not None and not _NAME.match(value):
                raise UsageError(f"{name} {value!r}: expected a name (letters, digits, . _ + -)")
        numbers = {
            "--slurm-cpus": self.cpus_per_task,
            "--slurm-max-concurrent": self.max_concurrent,
            "--tasks-per-element": self.tasks_per_element,
        }
        for name, number in numbers.items():
            if number is not None and number < 1:
                raise UsageError(f"{name} must be at least 1, got {number}")
        for line in self.extra:
            if "\n" in line or not line.strip().startswith("-"):
                raise UsageError(f"--slurm-extra {line!r}: expected one sbatch option, e.g. --constraint=X")
            flag = line.strip().split("=", 1)[0].split()[0]
            flag = flag if flag.startswith("--") else flag[:2]  # -o/x/%j.out: -o
            if flag in OWN_OPTIONS:
                own = OWN_OPTIONS[flag]
                raise UsageError(
                    f"--slurm-extra {line!r}: storekit sets {flag} itself",
                    hint=f"use {own}" if not own.startswith("nothing") else f"it can be changed by {own}",
                )
        lines = {
            "--slurm-extra": " ".join(self.extra),
            "--slurm-setup": self.setup or "",
            "--slurm-container": self.container or "",
        }
        for name, text in lines.items():
            if "\n" in text:
                raise UsageError(f"{name}: must be one line")
            if _SECRETISH.search(text):
                raise UsageError(
                    f"{name} seems to hold a credential: Slurm keeps job scripts in its state directory",
                    hint="give credentials through a profile or the environment of the job, not the script",
                )


def options_from_dict(doc: dict[str, Any]) -> SlurmOptions:
    """SlurmOptions as recorded in a submission (JSON: tuples came back as lists)."""
    known = {f.name for f in fields(SlurmOptions)}
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in doc.items() if k in known}
    return SlurmOptions(**values)


@dataclass(frozen=True, kw_only=True)
class JobScript:
    job_name: str
    log_dir: str
    command: Sequence[str]  # argv of storekit, run with exec
    array: str | None = None  # "0-41" for a job array (the %N is added here); None: one job


def render(script: JobScript, options: SlurmOptions) -> str:
    """The whole sbatch script text (deterministic: same inputs, same bytes)."""
    lines = [
        "#!/bin/bash",
        "# written by storekit; rerunning is safe: finished tasks have completion records",
        f"#SBATCH --job-name={script.job_name}",
    ]
    if script.array is not None:
        array = script.array + (f"%{options.max_concurrent}" if options.max_concurrent else "")
        lines += [f"#SBATCH --array={array}", f"#SBATCH --output={script.log_dir}/%A_%a.out"]
    else:
        lines.append(f"#SBATCH --output={script.log_dir}/%j.out")
    lines += [
        "#SBATCH --open-mode=append",
        "#SBATCH --requeue" if options.requeue else "#SBATCH --no-requeue",
    ]
    if options.requeue:  # the notice is for requeueing: without it the limit ends an element TIMEOUT
        lines.append(f"#SBATCH --signal={notice_signal(options.time)}")
    lines += ["#SBATCH --ntasks=1"]
    for flag, value in (
        ("partition", options.partition),
        ("time", options.time),
        ("cpus-per-task", options.cpus_per_task),
        ("mem", options.mem),
        ("mem-per-cpu", options.mem_per_cpu),
        ("account", options.account),
        ("qos", options.qos),
        ("dependency", options.dependency),
    ):
        if value is not None:
            lines.append(f"#SBATCH --{flag}={value}")
    lines += [f"#SBATCH {sbatch_line(line)}" for line in options.extra]
    lines.append("set -eu")
    # Slurm made the log with the submitter's umask (077: only its owner reads it); logs/ is the
    # team's area, so it is made group-readable as the scripts beside it are
    own_log = (
        '"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}.out"'
        if script.array is not None
        else '"${SLURM_JOB_ID}.out"'
    )
    lines.append(f"chmod g+r -- {shlex.quote(script.log_dir)}/{own_log} 2>/dev/null || :")
    if options.setup:
        lines.append(options.setup)
    prefix = f"{options.container} " if options.container else ""
    lines.append(f"exec {prefix}{shlex.join(script.command)}")
    return "\n".join(lines) + "\n"


def sbatch_line(option: str) -> str:
    """One --slurm-extra option as an #SBATCH line: sbatch splits those at spaces, so a value with
    spaces (--comment=my job) is quoted."""
    option = option.strip()
    flag, sep, value = option.partition("=")
    if sep and any(c.isspace() for c in value) and not value.startswith(('"', "'")):
        return f'{flag}="{value}"'
    return option


def time_limit_seconds(limit: str | None) -> int | None:
    """Seconds of a Slurm time limit (MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]); None when not given."""
    if limit is None or not _TIME.match(limit):
        return None
    days, _, rest = limit.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        h, m, sec = [*parts, 0, 0][:3]
        return ((int(days) * 24 + h) * 60 + m) * 60 + sec
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]


def notice_signal(limit: str | None) -> str:
    """USR1 90 s before the time limit; a quarter of a limit under 6 minutes (at least 10 s), so a
    short limit is not signalled at the element's start (Slurm would requeue it there for ever)."""
    seconds = time_limit_seconds(limit)
    if seconds is None or seconds >= 360:
        return PREEMPT_SIGNAL
    return f"B:USR1@{max(10, seconds // 4)}"
