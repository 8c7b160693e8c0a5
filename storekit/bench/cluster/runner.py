"""`slurm`'s runner of bench io's phases (registered in storekit/executors/base.py as local's is):
one agent per node, started as a job step of the `slurm` executor, driven by the TCP coordinator,
the run kept as a job of the job layer (record.py).

The CLI treats it as it treats local's runner (storekit/bench/runner.py): `settings` reads the
launch options it takes, `check` refuses what cannot run before anything is written, `dry_run_fields`
is what --dry-run adds, `run_suite` runs the suite and returns the document.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

from storekit.bench.cluster.coordinator import Cluster
from storekit.bench.cluster.launch import (
    CONNECT_AFTER_START_S,
    AgentSrunOptions,
    StepLauncher,
    check_nodes,
    launch,
    processes_per_node,
    refuse_unsupported,
    srun_command,
)
from storekit.bench.cluster.record import BenchRecord
from storekit.bench.cluster.suite import ClusterSuite
from storekit.bench.plan import BenchPlan, PhasePlan
from storekit.bench.results import WorkerResult
from storekit.bench.scratch import PosixScratch, S3Scratch
from storekit.bench.spec import BenchSpec
from storekit.errors import UsageError
from storekit.executors.base import get_executor
from storekit.slurm.step import StepInfo, allocation_nodes, in_allocation


class ClusterRunner:
    executor: ClassVar[str] = "slurm"
    # the launch options it takes (flag -> AgentSrunOptions field)
    launch_options: ClassVar[dict[str, str]] = {
        "--nodes": "nodes",
        "--slurm-partition": "partition",
        "--slurm-time": "time_limit",
        "--slurm-account": "account",
        "--coordinator-address": "coordinator_address",
        "--slurm-connect-timeout": "connect_timeout",
    }

    def __init__(self, kind: str = "posix", launch: AgentSrunOptions | None = None) -> None:
        self.kind = kind
        self.launch = launch or AgentSrunOptions(nodes=1)
        self.nodes = self.launch.nodes
        self.cpus: int | None = None
        self.cluster: Cluster | None = None

    @classmethod
    def settings(cls, given: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of the runner for the launch options given (flag -> value)."""
        values: dict[str, Any] = {field: given.get(flag) for flag, field in cls.launch_options.items()}
        timeout = values["connect_timeout"]
        if timeout is not None and timeout <= 0:
            raise UsageError(f"--slurm-connect-timeout {timeout:g}: expected a number of seconds above 0")
        if values["nodes"] is None:
            if not in_allocation():
                raise UsageError(
                    f"--executor {cls.executor} needs --nodes N outside an sbatch/salloc allocation"
                )
            values["nodes"] = allocation_nodes()
        launch = AgentSrunOptions(
            nodes=int(values["nodes"]),
            partition=values["partition"],
            time_limit=values["time_limit"],
            account=values["account"],
            coordinator_address=values["coordinator_address"],
            connect_timeout=timeout or CONNECT_AFTER_START_S,
        )
        return {"launch": launch}

    def _steps(self) -> StepLauncher:
        made = get_executor(self.executor)
        if not isinstance(made, StepLauncher):
            raise UsageError(f"executor {self.executor!r} cannot start one agent per node")
        return made

    def check(self, spec: BenchSpec) -> None:
        """Before anything is written: a POSIX target, srun, a controller, enough nodes."""
        refuse_unsupported(spec.target.kind)
        self.launch = replace(self.launch, processes_per_node=processes_per_node(spec))
        self.cpus = check_nodes(self._steps(), self.launch)

    def dry_run_fields(self) -> dict[str, Any]:
        srun = srun_command(self._steps(), self.launch, "COORDINATOR:PORT", self.cpus)
        return {"launch": {"executor": self.executor, "srun": srun}}

    def run(self, phase: PhasePlan, repeat: int) -> list[WorkerResult]:
        """One phase on every node at once (the launched agents)."""
        assert self.cluster is not None, "run_suite launches the agents first"
        return self.cluster.run(phase, repeat)

    def run_suite(
        self,
        plan: BenchPlan,
        scratch: PosixScratch | S3Scratch,
        *,
        progress: Callable[[int, int], None],
        warn: Callable[[str], None],
        info: Callable[[str], None],
        document: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> dict[str, Any]:
        """Launch the agents, run every phase on them, and keep the run as a job record: running,
        then done with the document `document(run)` makes, or failed/cancelled with the reason."""
        assert isinstance(scratch, PosixScratch)
        spec = plan.spec
        meta = {"run_id": plan.run_id, "target": spec.target.display, "nodes": self.launch.nodes,
                "config_hash": spec.config_hash()}  # fmt: skip
        record = BenchRecord.start(plan.to_dict(), meta, self.executor)
        if record is not None:
            info(f"job record: {record.path}")
        seen: Callable[[StepInfo], None] = record.step_seen if record is not None else (lambda step: None)
        try:
            with launch(self._steps(), self.launch, info, seen) as cluster:
                self.cluster = cluster
                run = ClusterSuite(plan, scratch, cluster, progress=progress, warn=warn).run()
            run["cleanup"]["nodes"] = cluster.cleanup
            doc = document(run)
        except BaseException as exc:
            if record is not None:
                with contextlib.suppress(Exception):  # the run's own error is what the caller must see
                    record.ended(exc)
            raise
        finally:
            self.cluster = None
        if record is not None:
            record.succeeded(doc)
        return doc
