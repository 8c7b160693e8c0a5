"""Slurm submission options: `--slurm-*` flags and the `[slurm]` tables of storekit.toml (the
site's) and of a pipeline TOML (that pipeline's), as one `SlurmOptions`, checked before anything is
written.

    [slurm]
    partition = "cpu"
    account = "proj42"
    time = "4:00:00"
    mem_per_cpu = "2G"
    extra = ["--constraint=avx2"]

A `--slurm-*` flag given on the command line wins over the pipeline's table, which wins over the
site's; those win over Slurm's own defaults. Keys are checked when read (exit 2 naming the file and
key). A foundation module (errors, tomlkeys and the standard library only): the site config parses
its [slurm] table here without reaching up into storekit.slurm, which writes the job scripts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from storekit.errors import ConfigError, UsageError

TIME = re.compile(r"^(\d+|\d+:\d{2}(:\d{2})?|\d+-\d+(:\d{2}(:\d{2})?)?)$")
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
        if self.time is not None and not TIME.match(self.time):
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


# key -> (SlurmOptions field, type)
KEYS: dict[str, tuple[str, type]] = {
    "partition": ("partition", str),
    "time": ("time", str),
    "cpus": ("cpus_per_task", int),
    "mem": ("mem", str),
    "mem_per_cpu": ("mem_per_cpu", str),
    "account": ("account", str),
    "qos": ("qos", str),
    "extra": ("extra", list),
    "container": ("container", str),
    "setup": ("setup", str),
    "max_concurrent": ("max_concurrent", int),
    "tasks_per_element": ("tasks_per_element", int),
    "log_dir": ("log_dir", str),
    "requeue": ("requeue", bool),
}


def parse_slurm_table(body: Any, source: str) -> dict[str, Any]:
    """The `[slurm]` table as SlurmOptions field values."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ConfigError(source, "slurm", 'expected a table, e.g. [slurm] with partition = "cpu"')
    out: dict[str, Any] = {}
    for key, value in body.items():
        if key not in KEYS:
            raise ConfigError(
                source, f"slurm.{key}", f"unknown key; expected one of {', '.join(sorted(KEYS))}"
            )
        name, kind = KEYS[key]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is list:
            ok = ok and all(isinstance(v, str) for v in value)
            value = tuple(value) if ok else value
        if not ok:
            raise ConfigError(
                source, f"slurm.{key}", f"expected {'a list of strings' if kind is list else kind.__name__}"
            )
        out[name] = value
    try:
        SlurmOptions(**out).check()
    except Exception as exc:  # the flag's wording, named where it came from
        raise ConfigError(source, "slurm", getattr(exc, "message", str(exc))) from None
    return out


def with_site_defaults(options: SlurmOptions, defaults: dict[str, Any]) -> SlurmOptions:
    """`options` with each field still at its default taken from the site's table."""
    blank = SlurmOptions()
    given = {f.name: defaults[f.name] for f in fields(SlurmOptions) if f.name in defaults}
    keep = {k: v for k, v in given.items() if getattr(options, k) == getattr(blank, k)}
    return replace(options, **keep)


def pipeline_slurm_table(path: Path) -> dict[str, Any]:
    """The `[slurm]` table of a pipeline TOML, checked like the site's (exit 2 naming file and key)."""
    from storekit.tomlkeys import parse_toml

    source = str(path)
    try:
        raw = parse_toml(path.read_bytes(), source)
    except OSError:
        return {}
    return parse_slurm_table(raw.get("slurm"), source)
