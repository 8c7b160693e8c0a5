"""One process on each of N nodes at once, as one Slurm job step: `srun --ntasks-per-node=1`.

The `slurm` executor's arrays (executor.py) run independent tasks whenever and wherever Slurm
places them; a gang of processes that must run together, one per node (bench io's agents), is a
job step instead. Inside an allocation (an sbatch script or salloc: $SLURM_JOB_ID is set) the step
runs on its nodes, which is what an admin who reserved them expects. Outside one, srun itself asks
Slurm for --nodes nodes (with --partition/--time/--account) and waits for them, as `srun -N4 ior`
does. The step's name carries a random suffix, so `squeue -s` tells this step from others' (squeue
shows its first 8 characters). The srun line holds no secret: whatever the processes must not show
on their command line goes through the environment.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from storekit.errors import StorekitError, UsageError
from storekit.slurm.commands import run_slurm

EXIT_WAIT_S = 30.0  # srun ends when its processes do; after this it is stopped


@dataclass(frozen=True, kw_only=True)
class StepOptions:
    nodes: int
    cpus_per_task: int | None = None  # what each process asks for (default: the one CPU of a task)
    partition: str | None = None  # these three only outside an allocation
    time_limit: str | None = None
    account: str | None = None
    job_name: str = "storekit"
    # srun stops every process once one exits non-zero (a gang is useless without a member); a step
    # of independent per-node runs (a drain on every node) lets the others finish
    kill_on_bad_exit: bool = True


@dataclass(frozen=True)
class StepInfo:
    """What squeue -s says of a running step: its id (JOBID.STEP) and its nodes, one name each."""

    step_id: str
    nodes: list[str]

    @property
    def job_id(self) -> str:
        return self.step_id.partition(".")[0]


def in_allocation() -> bool:
    return bool(os.environ.get("SLURM_JOB_ID"))


def allocation_nodes() -> int:
    """The nodes of the caller's allocation."""
    return int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or 1)


def unique_name(job_name: str) -> str:
    """`job_name` with a suffix that tells this run's step from others' (squeue shows 8 characters)."""
    return f"{job_name}-{secrets.token_hex(3)}"


def srun_command(opts: StepOptions, argv: Sequence[str]) -> list[str]:
    """The srun line that starts `argv` once on each of `opts.nodes` nodes."""
    line = ["srun", f"--nodes={opts.nodes}", f"--ntasks={opts.nodes}", "--ntasks-per-node=1",
            f"--kill-on-bad-exit={int(opts.kill_on_bad_exit)}", f"--job-name={opts.job_name}"]  # fmt: skip
    line += [f"--cpus-per-task={opts.cpus_per_task}"] if opts.cpus_per_task else []
    if not in_allocation():
        line += [f"--partition={opts.partition}"] if opts.partition else []
        line += [f"--time={opts.time_limit}"] if opts.time_limit else []
        line += [f"--account={opts.account}"] if opts.account else []
    return [*line, *argv]


def check_nodes(opts: StepOptions, cpus_wanted: int) -> int:
    """Refuse what cannot run before starting anything: no srun, no controller, an unknown
    partition, too few nodes. Returns the CPUs each process may ask for: `cpus_wanted`, at most what
    the smallest node has."""
    if shutil.which("srun") is None:
        run_slurm(["srun"])  # the one wording (and exit 5) for a missing Slurm client
    if in_allocation():
        have = allocation_nodes()
        where = f"this allocation (job {os.environ.get('SLURM_JOB_ID')})"
        node_cpus = [int(os.environ.get("SLURM_CPUS_ON_NODE") or 1)]
    else:
        sinfo = run_slurm(["sinfo", "-h", "-N", "-o", "%N|%P|%c"])
        nodes = partition_nodes(sinfo, opts.partition)
        known = sorted({line.split("|")[1].rstrip("*") for line in sinfo.split() if line.count("|") == 2})
        if opts.partition is not None and opts.partition not in known:
            raise UsageError(
                f"--slurm-partition {opts.partition!r}: no such partition on this cluster "
                f"(known: {', '.join(known) or 'none'})"
            )
        have, node_cpus = len(nodes), list(nodes.values())
        where = f"partition {opts.partition}" if opts.partition else "the default partition"
    if opts.nodes > have:
        raise UsageError(f"--nodes {opts.nodes}: {where} has {have} node(s)")
    return max(1, min([cpus_wanted, *node_cpus]))


def partition_nodes(sinfo: str, partition: str | None) -> dict[str, int]:
    """Node name -> CPUs of `partition` (None: the default one, marked `*` by sinfo) from
    `%N|%P|%c` lines."""
    nodes = {}
    for line in sinfo.split():
        name, part, cpus = [*line.split("|"), "", ""][:3]
        if (part.rstrip("*") == partition) if partition else part.endswith("*"):
            nodes[name] = int(cpus) if cpus.isdigit() else 1
    return nodes


def step_info(job_name: str) -> StepInfo | None:
    """The running job step named `job_name` (squeue -s), or None while it does not run."""
    with contextlib.suppress(StorekitError, OSError):
        for line in run_slurm(["squeue", "-h", "-s", "-o", "%i|%j|%N"]).splitlines():
            step_id, name, nodelist = [*line.split("|"), "", ""][:3]
            if name == job_name and nodelist:
                return StepInfo(step_id, run_slurm(["scontrol", "show", "hostnames", nodelist]).split())
    return None


class _Tail:
    """srun's output (its processes' logs) goes to our stderr; the last lines explain a failure."""

    def __init__(self, stream: Iterator[str]) -> None:
        self.lines: deque[str] = deque(maxlen=20)
        self.thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self.thread.start()

    def _pump(self, stream: Iterator[str]) -> None:
        for line in stream:
            self.lines.append(line.rstrip())
            print(line.rstrip(), file=sys.stderr, flush=True)

    def last(self) -> str:
        self.thread.join(timeout=2)
        errors = [line for line in self.lines if "error" in line.lower()]
        return (errors or list(self.lines) or ["no output"])[-1]


class Step:
    """A started srun: alive while it runs; `info()` once Slurm runs the step on its nodes."""

    def __init__(
        self,
        opts: StepOptions,
        argv: Sequence[str],
        env: Mapping[str, str],
        on_seen: Callable[[StepInfo], None] | None = None,
    ) -> None:
        """`on_seen(info)`: once, when `info()` first finds the step running (e.g. to record its id)."""
        self.opts = opts
        self.argv = srun_command(opts, argv)
        self.seen: StepInfo | None = None
        self.on_seen = on_seen
        # its own session: Ctrl-C reaches only the caller, which stops the processes in order
        self.proc = subprocess.Popen(
            self.argv,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        self.tail = _Tail(self.proc.stdout)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def info(self) -> StepInfo | None:
        """The step as squeue shows it now (None: not running); the last one seen is kept."""
        found = step_info(self.opts.job_name)
        if found is not None:
            first, self.seen = self.seen is None, found
            if first and self.on_seen is not None:
                self.on_seen(found)
        return found

    def failure(self) -> str:
        """Why srun ended: its exit status and its last (error) line."""
        return f"srun failed (exit {self.proc.returncode}): {self.tail.last()}"

    def end(self, wait_s: float = EXIT_WAIT_S) -> None:
        """srun ends when its processes do; if it does not within `wait_s`, it is stopped (and with
        it the step). Its last output reaches our stderr before this returns."""
        deadline = time.monotonic() + wait_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.tail.thread.join(timeout=5)


def start_step(
    opts: StepOptions,
    argv: Sequence[str],
    env: Mapping[str, str],
    on_seen: Callable[[StepInfo], None] | None = None,
) -> Step:
    """Start `argv` on each of `opts.nodes` nodes (srun; `env` added to ours, never on argv)."""
    return Step(opts, argv, env, on_seen)
