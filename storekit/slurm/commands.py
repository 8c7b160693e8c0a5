"""Slurm's client commands (sbatch, squeue, scontrol, scancel), each failure one storekit error.

A missing command, a controller that does not answer, or a client that cannot find its config is
retryable (exit 5): the cluster, not the request, is at fault. A request Slurm refuses (an unknown
partition, account or qos) is a usage error (exit 2); anything else exit 1. `sacct` is never used:
accounting is often disabled, so job state comes from `squeue` and `scontrol show job` only.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from storekit.errors import StorekitError, UnreachableError, UsageError

TIMEOUT_S = 60.0
_UNREACHABLE = re.compile(
    r"unable to contact slurm controller|could not establish a configuration source|"
    r"connection refused|socket timed out|slurm_load_\w+ error|communication connection failure|"
    r"unable to establish|zero bytes were transmitted|fetch_config|resolve_ctls|"
    r"slurm backup controller in standby|munge",
    re.IGNORECASE,
)
_REFUSED = re.compile(
    r"invalid (partition|account|qos|time limit|dependency|job array)|"
    r"unrecognized option|invalid option|invalid --|requested node configuration is not available|"
    r"memory specification can not be satisfied|more processors requested than permitted|"
    r"job violates accounting/qos policy|batch job submission failed: invalid",
    re.IGNORECASE,
)
_NO_SLURM_HINT = "run it on a host with Slurm's client commands and a reachable controller (scontrol ping)"


def run_slurm(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT_S,
    input_text: str | None = None,
) -> str:
    """Run a Slurm client command and return its stdout; raise one storekit error otherwise."""
    exe = shutil.which(args[0], path=None if env is None else env.get("PATH"))
    if exe is None:
        raise UnreachableError(f"{args[0]} not found: Slurm's client commands are not installed here",
                               hint=_NO_SLURM_HINT)  # fmt: skip
    try:
        proc = subprocess.run(
            [exe, *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=None if env is None else dict(env),
            input=input_text,
        )
    except subprocess.TimeoutExpired:
        raise UnreachableError(
            f"{args[0]} did not answer within {timeout:.0f} s (Slurm controller overloaded or down)",
            hint="retry later; `scontrol ping` shows whether the controller is up",
        ) from None
    except OSError as exc:
        raise UnreachableError(
            f"{args[0]} could not be started: {exc.strerror}", hint=_NO_SLURM_HINT
        ) from None
    if proc.returncode != 0:
        raise _failure(args[0], proc.returncode, proc.stderr)
    return proc.stdout


def _failure(command: str, code: int, stderr: str) -> StorekitError:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    said = _strip_prefix(command, lines[-1]) if lines else f"exited with code {code}"
    message = f"{command} failed: {said}"
    if _UNREACHABLE.search(stderr):
        return UnreachableError(message, hint=_NO_SLURM_HINT)
    if _REFUSED.search(stderr):
        return UsageError(message, hint="check the --slurm-* options against `sinfo -s` and your account")
    return StorekitError(message)


def _strip_prefix(command: str, line: str) -> str:
    for prefix in (f"{command}: error: ", f"{command}: fatal: ", f"{command}: "):
        if line.startswith(prefix):
            return line[len(prefix) :]
    return line


# -- sbatch --------------------------------------------------------------------------------------------


def submit(script: str, args: Sequence[str] = (), *, env: Mapping[str, str] | None = None) -> str:
    """`sbatch --parsable [args] SCRIPT`: the new job's id (an array's job id)."""
    out = run_slurm(["sbatch", "--parsable", *args, script], env=env).strip()
    job_id = out.split(";")[0]  # `id;cluster` on federated/multi-cluster setups
    if not job_id.isdigit():
        raise StorekitError(f"sbatch answered {out!r}, not a job id")
    return job_id


# -- squeue and scontrol show job ----------------------------------------------------------------------


@dataclass(frozen=True)
class QueuedJob:
    job_id: str  # 123 or 123_4 for an array element
    array_job_id: str  # 123 (itself for a plain job)
    array_index: int | None
    state: str  # PENDING, RUNNING, COMPLETING, ...
    reason: str  # why pending (Dependency, DependencyNeverSatisfied, Resources, ...) or the nodes


def queued(job_ids: Sequence[str]) -> list[QueuedJob]:
    """What `squeue` lists of these jobs, one row per array element (`-r`); finished jobs are absent."""
    if not job_ids:
        return []
    out = run_slurm(["squeue", "-h", "-r", "-j", ",".join(job_ids), "-o", "%i|%F|%K|%T|%R"])
    return parse_squeue(out)


def parse_squeue(out: str) -> list[QueuedJob]:
    rows = []
    for line in out.splitlines():
        parts = line.strip().split("|", 4)
        if len(parts) != 5:
            continue
        job_id, array_job, index, state, reason = parts
        rows.append(
            QueuedJob(
                job_id=job_id,
                array_job_id=array_job,
                array_index=int(index) if index.isdigit() else None,
                state=state,
                reason=reason,
            )
        )
    return rows


_FIELD = re.compile(r"(?:^|\s)([A-Za-z][\w:/]*)=")


def parse_scontrol_record(line: str) -> dict[str, str]:
    """`Key=Value Key2=Va lue` (one `scontrol -o` record) into a dict; values may hold spaces."""
    found = list(_FIELD.finditer(line))
    record = {}
    for m, nxt in zip(found, [*found[1:], None], strict=True):
        end = nxt.start() if nxt is not None else len(line)
        record[m[1]] = line[m.end() : end].strip()
    return record


def show_jobs(job_id: str) -> list[dict[str, str]]:
    """`scontrol -o show job ID`: one record per element still known to the controller ([] if none)."""
    try:
        out = run_slurm(["scontrol", "-o", "show", "job", job_id])
    except StorekitError as exc:
        if "invalid job id" in exc.message.lower():
            return []  # finished longer than MinJobAge ago: only the records know now
        raise
    return [parse_scontrol_record(ln) for ln in out.splitlines() if ln.strip()]


# -- scontrol show config, requeue; scancel ------------------------------------------------------------


def show_config() -> dict[str, str]:
    """`scontrol show config` as a dict (`MaxArraySize`, `MaxJobCount`, ...)."""
    return parse_show_config(run_slurm(["scontrol", "show", "config"]))


def parse_show_config(out: str) -> dict[str, str]:
    config = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            config[key.strip()] = value.strip()
    return config


def requeue(job_id: str) -> None:
    run_slurm(["scontrol", "requeue", job_id])


def cancel(job_ids: Sequence[str]) -> None:
    if job_ids:
        run_slurm(["scancel", *job_ids])


def node_addresses(partition: str | None) -> list[str]:
    """NodeAddr of every node in `partition` (the default partition's nodes when None)."""
    out = run_slurm(["scontrol", "-o", "show", "node"])
    addrs = []
    default = None if partition is not None else default_partition()
    known: set[str] = set()
    for line in out.splitlines():
        record = parse_scontrol_record(line)
        parts = record.get("Partitions", "").split(",")
        known.update(p for p in parts if p)
        if (partition or default) in parts:
            addrs.append(record.get("NodeAddr", ""))
    if partition is not None and partition not in known:
        raise UsageError(
            f"--slurm-partition {partition!r}: no such partition on this cluster "
            f"(known: {', '.join(sorted(known)) or 'none'})"
        )
    return addrs


def default_partition() -> str | None:
    """The partition marked Default=YES (sinfo shows it with a trailing `*`)."""
    for name in run_slurm(["sinfo", "-h", "-o", "%P"]).split():
        if name.endswith("*"):
            return name[:-1]
    return None
