"""The sbatch script of a job array: the options admins set, and one `exec storekit ...` line.

The script is written under the job's `logs/` beside the element logs and is stored by Slurm in its
state directory, so it must hold no secret: only options, paths and the command. The command is
`exec`ed so `--signal=B:USR1@90` (delivered to the batch shell) reaches storekit itself.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from storekit.slurmopts import TIME, SlurmOptions

PREEMPT_SIGNAL = "B:USR1@90"  # 90 s before the time limit, to the batch step's process


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
    if limit is None or not TIME.match(limit):
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
