"""The sbatch script of a job array: the options admins set, and one `exec storekit ...` line.

The script is written under the job's `logs/` beside the element logs and is stored by Slurm in its
state directory, so it must hold no secret: only options, paths and the command. The command is
`exec`ed so `--signal=B:USR1@90` (delivered to the batch shell) reaches storekit itself.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from storekit.errors import UsageError

PREEMPT_SIGNAL = "B:USR1@90"  # 90 s before the time limit, to the batch step's process
_TIME = re.compile(r"^(\d+|\d+:\d{2}(:\d{2})?|\d+-\d+(:\d{2}(:\d{2})?)?)$")
_MEM = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)
_NAME = re.compile(r"^[\w.+-]+$")
_SECRETISH = re.compile(r"(secret|password|passwd|token|credential|aws_access_key)", re.IGNORECASE)


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
    extra_sbatch_args: tuple[str, ...] = field(default=())  # command-line only (tests: --nodelist)

    def check(self) -> None:
        """Refuse (exit 2) what would make a broken script, before anything is written."""
        if self.time is not None and not _TIME.match(self.time):
            raise UsageError(f"--slurm-time {self.time!r}: expected MM, HH:MM:SS or D-HH:MM")
        if self.mem is not None and not _MEM.match(self.mem):
            raise UsageError(f"--slurm-mem {self.mem!r}: expected a number with K, M, G or T, e.g. 8G")
        names = {
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
        "#SBATCH --requeue",
        f"#SBATCH --signal={PREEMPT_SIGNAL}",
        "#SBATCH --ntasks=1",
    ]
    for flag, value in (
        ("partition", options.partition),
        ("time", options.time),
        ("cpus-per-task", options.cpus_per_task),
        ("mem", options.mem),
        ("account", options.account),
        ("qos", options.qos),
    ):
        if value is not None:
            lines.append(f"#SBATCH --{flag}={value}")
    lines += [f"#SBATCH {line.strip()}" for line in options.extra]
    lines.append("set -eu")
    if options.setup:
        lines.append(options.setup)
    prefix = f"{options.container} " if options.container else ""
    lines.append(f"exec {prefix}{shlex.join(script.command)}")
    return "\n".join(lines) + "\n"
