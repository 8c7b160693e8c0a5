"""Starting the agents: one per node, as one job step of the `slurm` executor (storekit/slurm/step.py:
in the caller's allocation, or in one srun asks for), the coordinator staying on the submitting host.

Agents connect back to it over TCP and present a one-time token they get through the environment
(never the command line: argv is visible to every user on a node). The srun command holds no secret
and is printed by --dry-run.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from storekit.bench.cluster.coordinator import Cluster, NodeLost, NotConnected
from storekit.bench.cluster.wire import TOKEN_ENV
from storekit.bench.spec import BenchSpec
from storekit.errors import Interrupted, UnreachableError, UsageError
from storekit.slurm.step import Step, StepInfo, StepOptions, unique_name

CONNECT_AFTER_START_S = 300.0  # once srun runs, its agents start within this (python import, NFS)
# the default of --slurm-connect-timeout: counted from the job step's start on the nodes (srun's own
# wait for an allocation is not limited) and again from the first agent's connection, generous for
# a slow node


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


@runtime_checkable
class StepLauncher(Protocol):
    """What the `slurm` executor offers a gang of processes (storekit/slurm/executor.py)."""

    def step_command(self, opts: StepOptions, argv: list[str]) -> list[str]: ...

    def check_step(self, opts: StepOptions, cpus_wanted: int) -> int: ...

    def step(
        self, opts: StepOptions, argv: list[str], env: dict[str, str], on_seen: Callable[[StepInfo], None]
    ) -> Step: ...


def step_options(opts: AgentSrunOptions, cpus: int | None = None) -> StepOptions:
    """The job step that runs the agents; `cpus`: what each asks for, so its workers are not all
    bound to the one CPU a task gets by default."""
    return StepOptions(nodes=opts.nodes, cpus_per_task=cpus, partition=opts.partition,
                       time_limit=opts.time_limit, account=opts.account, job_name=opts.job_name)  # fmt: skip


def agent_argv(connect: str) -> list[str]:
    return [sys.executable, "-m", "storekit", "bench", "agent", "--connect", connect]


def srun_command(
    executor: StepLauncher, opts: AgentSrunOptions, connect: str, cpus: int | None = None
) -> list[str]:
    """The srun line that starts one agent per node (no secret in it)."""
    return executor.step_command(step_options(opts, cpus), agent_argv(connect))


def check_nodes(executor: StepLauncher, opts: AgentSrunOptions) -> int:
    """Refuse what cannot run before starting anything: no srun, no controller, too few nodes.
    Returns the CPUs each agent asks for: one per worker, at most what the smallest node has."""
    return executor.check_step(step_options(opts), opts.processes_per_node)


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


@contextlib.contextmanager
def launch(
    executor: StepLauncher,
    opts: AgentSrunOptions,
    info: Callable[[str], None],
    on_step: Callable[[StepInfo], None] = lambda seen: None,
) -> Iterator[Cluster]:
    """Start the agents, accept them, measure clocks; on leaving, shut them down and end the step.
    `on_step(info)`: once Slurm runs the step (its job and step id, its nodes)."""
    cpus = check_nodes(executor, opts)
    token = secrets.token_hex(16)
    opts = replace(opts, job_name=unique_name(opts.job_name))
    listener = socket.create_server(("0.0.0.0", 0), backlog=max(opts.nodes, 16))
    connect = f"{coordinator_address(opts.coordinator_address)}:{listener.getsockname()[1]}"
    argv = agent_argv(connect)
    step_opts = step_options(opts, cpus)
    info(f"starting {opts.nodes} agents: {' '.join(executor.step_command(step_opts, argv))}")
    step = executor.step(step_opts, argv, {TOKEN_ENV: token}, on_step)
    cluster: Cluster | None = None
    try:
        try:
            cluster = Cluster.accept(
                listener, opts.nodes, token, alive=step.alive,
                connect_s=opts.connect_timeout, step_running=lambda: step.info() is not None,
            )  # fmt: skip
        except NotConnected as exc:
            seen = step.info() or step.seen
            missing = sorted(set(seen.nodes if seen else []) - set(exc.connected)) or ["?"]
            since = "the first" if exc.connected else "the job step's start"
            whose = "node {}: its agent" if len(missing) == 1 else "nodes {}: their agents"
            raise NodeLost(
                f"{whose.format(', '.join(missing))} did not connect within {opts.connect_timeout:.0f} s "
                f"of {since} ({len(exc.connected)} of {opts.nodes} connected"
                + (f": {', '.join(exc.connected)})" if exc.connected else ")"),
                hint="a stalled node (a hung mount?); --slurm-connect-timeout gives slow nodes longer",
            ) from None
        except UnreachableError as exc:
            if not step.alive():
                raise UnreachableError(step.failure()) from None
            raise exc
        except KeyboardInterrupt:  # Ctrl-C while a node stalls: nothing ran, and nothing resumes
            if step.seen is None:
                step.info()  # a step that runs is named in what this run leaves (its job's id)
            raise Interrupted(
                f"interrupted while waiting for {opts.nodes} agents to connect; their job step is stopped",
                hint="a benchmark is run again, not resumed",
            ) from None
        finally:
            listener.close()
        if step.seen is None:
            step.info()  # the agents are connected: their step runs
        cluster.measure_clocks()
        yield cluster
    finally:
        if cluster is not None:
            cluster.cleanup = cluster.shutdown()
        if cluster is not None:
            step.end()  # srun ends when its agents do (stopped if not, in 30 s)
        else:
            step.end(wait_s=0.0)  # never started: stop it


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
