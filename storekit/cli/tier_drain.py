"""`storekit tier --drain --executor slurm --nodes N`: a drain on every node, as one job step.

Nothing is planned here: the burst tier is node-local, so each node plans and drains its own, by
running `storekit tier --drain` there (srun --ntasks-per-node=1 through the `slurm` executor's step
launcher, storekit/slurm/step.py) with `--node-record WORK_DIR`, which makes it record its report
as its task of the job (storekit/tier/drainjob.py). This module checks the options, says what
--dry-run would start, and runs the step; cli/tier.py prints every node's units.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any

from storekit.config import SiteConfig, find_config_file
from storekit.errors import UsageError
from storekit.slurmopts import TIME

JOB_NAME = "storekit-drain"  # squeue shows 8 characters: "storekit"; the step's name adds a suffix


@dataclass(frozen=True)
class DrainLaunch:
    """The step that drains every node: the executor, its options and each node's command."""

    executor: Any  # storekit.slurm.executor.SlurmExecutor
    opts: Any  # storekit.slurm.step.StepOptions
    node_args: tuple[str, ...]  # `tier --drain ...` as each node runs it, without --node-record

    def argv(self, work_dir: str) -> list[str]:
        return [sys.executable, "-m", "storekit", *self.node_args, "--node-record", work_dir]

    def dry_run_doc(self) -> dict[str, Any]:
        srun = self.executor.step_command(self.opts, self.argv("WORK_DIR"))
        return {"action": "drain", "dry_run": True, "executor": self.executor.name,
                "nodes": self.opts.nodes, "srun": srun}  # fmt: skip

    def run(self, site: SiteConfig, info: Any) -> tuple[Any, list[dict[str, Any]]]:
        """Make the job record, start the step, wait: (the record, every node's outcome)."""
        from storekit.slurm.step import unique_name
        from storekit.tier.drainjob import DrainRecord

        request = {"drain": self.node_args, "nodes": self.opts.nodes}
        record = DrainRecord.create(site, self.opts.nodes, request)
        info(f"job record: {record.path}")
        opts = replace(self.opts, job_name=unique_name(self.opts.job_name))
        argv = self.argv(str(record.path))
        info(f"draining {opts.nodes} nodes: {' '.join(self.executor.step_command(opts, argv))}")
        step = self.executor.step(opts, argv, {}, record.step_seen)
        return record, record.run(step)


def drain_launch(
    site: SiteConfig,
    config: str | None,
    *,
    executor: str | None,
    nodes: int | None,
    partition: str | None,
    time_limit: str | None,
    account: str | None,
    what: list[str],
) -> DrainLaunch | None:
    """The drain step `--executor` asks for (None: the drain runs here, as ever). `what`: the
    drain's own arguments (`--drain=VALUE` or `--policy NAME`, `--tier NAME`). Refuses (exit 2, 5)
    what cannot run before anything is written: no srun or controller, too few nodes."""
    from storekit.executors.base import executor_for_option

    chosen = executor_for_option(executor or "local")
    if not chosen.detached:
        if any(v is not None for v in (nodes, partition, time_limit, account)):
            raise UsageError(f"--nodes and --slurm-* need --executor slurm, not {chosen.name}")
        return None
    from storekit.slurm.executor import SlurmExecutor
    from storekit.slurm.step import StepOptions, allocation_nodes, in_allocation

    if not isinstance(chosen, SlurmExecutor):
        raise UsageError(f"--executor {chosen.name}: a drain on every node runs on Slurm only")
    defaults = dict(site.slurm)
    partition = partition if partition is not None else defaults.get("partition")
    account = account if account is not None else defaults.get("account")
    if time_limit is not None and not TIME.match(time_limit):
        raise UsageError(f"--slurm-time {time_limit!r}: expected MM, HH:MM:SS or D-HH:MM")
    if nodes is None:
        if not in_allocation():
            raise UsageError("--drain --executor slurm needs --nodes N outside an sbatch/salloc allocation")
        nodes = allocation_nodes()
    if nodes < 1:
        raise UsageError(f"--nodes {nodes}: expected a number of nodes above 0")
    opts = StepOptions(nodes=nodes, partition=partition, time_limit=time_limit, account=account,
                       job_name=JOB_NAME, kill_on_bad_exit=False)  # fmt: skip
    chosen.check_step(opts, 1)  # srun, a controller, enough nodes; nothing written yet
    found = find_config_file(config)
    args = ["tier", *what, *(["--config", str(found.resolve())] if found is not None else []), "--quiet"]
    return DrainLaunch(chosen, opts, tuple(args))
