"""`storekit tier ... --executor slurm`: a plan's units as the tasks of a job (storekit/tier/job.py).

The plan is made (and committed moves a kill interrupted are finished) here, as for a local run;
the units then move in the executor's elements, each with the same mover and journals, and this
command waits for them and reports every unit as a local run does. The job's work dir stays as its
record (`storekit jobs status`); `storekit jobs rerun` resubmits the units that failed or were
never done, and so does the same command (a new plan: a unit whose move a kill stopped resumes
from its journal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from storekit.config import SiteConfig, find_config_file
from storekit.errors import Interrupted, StorekitError, UsageError
from storekit.executors.base import Executor
from storekit.slurmopts import SlurmOptions, with_site_defaults
from storekit.tier.mover import UnitResult
from storekit.tier.plan import TierPlan


def job_executor(
    name: str, site: SiteConfig, config: str | None, *, partition: str | None, time_limit: str | None
) -> Executor | None:
    """The executor `--executor NAME` names, set up to run a tier job; None for one that runs in
    this process (local: the units move here, as they always did, with no job record)."""
    from storekit.executors.base import executor_for_option

    chosen = executor_for_option(name)
    if not chosen.detached:
        if partition is not None or time_limit is not None:
            raise UsageError(f"--slurm-partition/--slurm-time need --executor slurm, not {name}")
        return None
    from storekit.slurm.executor import SlurmExecutor

    if not isinstance(chosen, SlurmExecutor):
        raise UsageError(f"--executor {name}: tier moves run as jobs on Slurm only")
    options = with_site_defaults(SlurmOptions(partition=partition, time=time_limit), dict(site.slurm))
    options.check()
    found = find_config_file(config)
    return replace(chosen, options=options, config=str(found.resolve()) if found is not None else None)


def run_job(
    plan: TierPlan, site: SiteConfig, executor: Executor, on_unit: Callable[[UnitResult], None]
) -> tuple[list[UnitResult], dict[str, Any]]:
    """Run the plan's units as a job on `executor`, wait, and return every unit's result (plan
    order) and what the report adds (the work dir, the executor)."""
    from storekit.tier.job import create_job, job_results

    job = create_job(plan, site)
    work = job.dir
    with work.leased():
        todo = sorted(set(range(len(plan.units))) - work.done_tasks())  # the same plan again: done stays
        submitted = len(work.submissions())
        try:
            executor.run(job, todo, workers=1, progress=lambda docs, tokens, nbytes: None)
        except Interrupted:
            raise
        except StorekitError:
            if len(work.submissions()) == submitted:  # nothing ran (sbatch refused, ...): that error
                raise
            # the units' own failures: each is reported below from its record
    results = job_results(work, plan)
    for result in results:
        on_unit(result)
    return results, {"executor": executor.name, "work_dir": str(work.path)}
