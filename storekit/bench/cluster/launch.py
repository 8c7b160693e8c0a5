"""Starting the agents: one per node with `srun --ntasks-per-node=1`, in the caller's allocation or
in one srun asks for.

Inside an allocation (an sbatch script or salloc: $SLURM_JOB_ID is set) the agents run as a job step
on its nodes, which is what an admin who reserved the nodes expects. Outside one, srun itself asks
Slurm for --nodes nodes (with --partition/--time/--account) and waits for them, as `srun -N4 ior`
does; the coordinator stays on the submitting host. Agents connect back to it over TCP and present
a one-time token they get through the environment (never the command line: argv is visible to every
user on a node). The srun command holds no secret and is printed by --dry-run.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from storekit.bench.cluster.coordinator import Cluster, NodeLost, NotConnected
from storekit.bench.cluster.wire import TOKEN_ENV
from storekit.bench.spec import BenchSpec
from storekit.errors import Interrupted, StorekitError, UnreachableError, UsageError
from storekit.slurm.commands import run_slurm

CONNECT_AFTER_START_S = 300.0  # once srun runs, its agents start within this (python import, NFS)
# the default of --slurm-connect-timeout: counted from the job step's start on the nodes (srun's own
# wait for an allocation is not limited) and again from the first agent's connection, generous for
# a slow node
SRUN_EXIT_WAIT_S = 30.0


@dataclass(frozen=True, kw_only=True)
class AgentSrunOptions:
    """How `bench io --executor slurm` starts one agent per node with srun (the sbatch options of
    storekit's array jobs are storekit.slurmopts.SlurmOptions)."""

    nodes: int
    processes_per_node: int = 1  # the most workers one node runs at once: CPUs each agent asks for
    partition: str | None = None
    time_limit: str | None = None
    account: str | None = None
    coordinator_address: str | None = None
    connect_timeout: float = CONNECT_AFTER_START_S
    job_name: str = "bench-io"  # squeue shows 8 characters


def in_allocation() -> bool:
    return bool(os.environ.get("SLURM_JOB_ID"))


def srun_command(opts: AgentSrunOptions, connect: str, cpus: int | None = None) -> list[str]:
    """The srun line that starts one agent per node (no secret in it). `cpus`: what each agent asks
    for, so its workers are not all bound to the one CPU a task gets by default."""
    argv = ["srun", f"--nodes={opts.nodes}", f"--ntasks={opts.nodes}", "--ntasks-per-node=1",
            "--kill-on-bad-exit=1", f"--job-name={opts.job_name}"]  # fmt: skip
    argv += [f"--cpus-per-task={cpus}"] if cpus else []
    if not in_allocation():
        argv += [f"--partition={opts.partition}"] if opts.partition else []
        argv += [f"--time={opts.time_limit}"] if opts.time_limit else []
        argv += [f"--account={opts.account}"] if opts.account else []
    return [*argv, sys.executable, "-m", "storekit", "bench", "agent", "--connect", connect]


def check_nodes(opts: AgentSrunOptions) -> int:
    """Refuse what cannot run before starting anything: no srun, no controller, too few nodes.
    Returns the CPUs each agent asks for: one per worker, at most what the smallest node has."""
    if shutil.which("srun") is None:
        run_slurm(["srun"])  # the one wording (and exit 5) for a missing Slurm client
    if in_allocation():
        have = int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or 1)
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
    return max(1, min([opts.processes_per_node, *node_cpus]))


def partition_nodes(sinfo: str, partition: str | None) -> dict[str, int]:
    """Node name -> CPUs of `partition` (None: the default one, marked `*` by sinfo) from
    `%N|%P|%c` lines."""
    nodes = {}
    for line in sinfo.split():
        name, part, cpus = [*line.split("|"), "", ""][:3]
        if (part.rstrip("*") == partition) if partition else part.endswith("*"):
            nodes[name] = int(cpus) if cpus.isdigit() else 1
    return nodes


def coordinator_address(override: str | None) -> str:
    """Where agents reach us: --coordinator-address, else this host's address on the network that
    leads elsewhere (a hostname that resolves to loopback, as Debian's 127.0.1.1 does, would make
    every agent connect to its own node)."""
    if override:
        return override
    name = socket.gethostname()
    with contextlib.suppress(OSError):
        address = socket.gethostbyname(name)
        if not address.startswith("127."):
            return address
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("10.255.255.255", 9))  # UDP: picks the outgoing interface, sends nothing
        return str(probe.getsockname()[0])
    return "127.0.0.1"


class _Tail:
    """srun's output (the agents' logs) goes to our stderr; the last lines explain a failure."""

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


@contextlib.contextmanager
def launch(opts: AgentSrunOptions, info: Callable[[str], None]) -> Iterator[Cluster]:
    """Start the agents, accept them, measure clocks; on leaving, shut them down and reap srun."""
    cpus = check_nodes(opts)
    token = secrets.token_hex(16)
    # squeue shows the first 8 characters (bench-io); the rest tells this run's step from others'
    opts = replace(opts, job_name=f"{opts.job_name}-{secrets.token_hex(3)}")
    listener = socket.create_server(("0.0.0.0", 0), backlog=max(opts.nodes, 16))
    connect = f"{coordinator_address(opts.coordinator_address)}:{listener.getsockname()[1]}"
    argv = srun_command(opts, connect, cpus)
    info(f"starting {opts.nodes} agents: {' '.join(argv)}")
    # its own session: Ctrl-C reaches only us, and we stop the agents in order (abort, then cleanup)
    proc = subprocess.Popen(
        argv,
        env={**os.environ, TOKEN_ENV: token},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    tail = _Tail(proc.stdout)
    cluster: Cluster | None = None
    try:
        try:
            cluster = Cluster.accept(
                listener, opts.nodes, token, alive=lambda: proc.poll() is None,
                connect_s=opts.connect_timeout, step_running=lambda: bool(step_nodes(opts.job_name)),
            )  # fmt: skip
        except NotConnected as exc:
            missing = sorted(set(step_nodes(opts.job_name)) - set(exc.connected)) or ["?"]
            since = "the first" if exc.connected else "the job step's start"
            whose = "node {}: its agent" if len(missing) == 1 else "nodes {}: their agents"
            raise NodeLost(
                f"{whose.format(', '.join(missing))} did not connect within {opts.connect_timeout:.0f} s "
                f"of {since} ({len(exc.connected)} of {opts.nodes} connected"
                + (f": {', '.join(exc.connected)})" if exc.connected else ")"),
                hint="a stalled node (a hung mount?); --slurm-connect-timeout gives slow nodes longer",
            ) from None
        except UnreachableError as exc:
            if proc.poll() is not None:
                raise UnreachableError(f"srun failed (exit {proc.returncode}): {tail.last()}") from None
            raise exc
        except KeyboardInterrupt:  # Ctrl-C while a node stalls: nothing ran, and nothing resumes
            raise Interrupted(
                f"interrupted while waiting for {opts.nodes} agents to connect; their job step is stopped",
                hint="a benchmark is run again, not resumed",
            ) from None
        finally:
            listener.close()
        cluster.measure_clocks()
        yield cluster
    finally:
        if cluster is not None:
            cluster.cleanup = cluster.shutdown()
        _reap(proc, wait_s=SRUN_EXIT_WAIT_S if cluster is not None else 0.0)  # never started: stop it
        tail.thread.join(timeout=5)  # the agents' last words reach our stderr before we exit


def step_nodes(job_name: str) -> list[str]:
    """The nodes of the running job step named `job_name` (squeue -s), one name each."""
    with contextlib.suppress(StorekitError, OSError):
        for line in run_slurm(["squeue", "-h", "-s", "-o", "%j|%N"]).splitlines():
            name, _, nodelist = line.partition("|")
            if name == job_name and nodelist:
                return run_slurm(["scontrol", "show", "hostnames", nodelist]).split()
    return []


def _reap(proc: subprocess.Popen[str], wait_s: float = SRUN_EXIT_WAIT_S) -> None:
    """srun ends when its agents do; if it does not, it is stopped (and with it the job step)."""
    deadline = time.monotonic() + wait_s
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=SRUN_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def processes_per_node(spec: BenchSpec) -> int:
    """The most worker processes one node runs in any phase of this spec."""
    most = max(spec.workers)
    if "checkpoint" in spec.patterns:
        most = max(most, spec.ranks // spec.nodes)
    return most


def refuse_unsupported(kind: str) -> None:
    if kind != "posix":
        raise UsageError(
            "--executor slurm benchmarks a shared POSIX filesystem (Lustre, NFS, CephFS, GPFS); S3 "
            "targets run from one node (--executor local)"
        )
