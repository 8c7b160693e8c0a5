"""Tier moves as a job of the job layer (kind "tier"): a plan's units are the job's tasks.

`storekit tier ... --executor slurm` writes the plan, as `--plan-out` renders it (keyed digest and
all), into a job work dir in the shared tier's scratch/ (`storekit-tier-<action>-<digest>`), and
the executor runs its tasks: task i is unit i, checked again and moved by the same code as a local
run (storekit.tier.apply.apply_unit: the mover, the unit journals, the unit's lease). A task's
completion record holds the unit's result; a unit whose move failed leaves a failure record instead
(exit code and reason), and the next task goes on, as in a local run. An element killed during a
move leaves the unit's journal: the task has no record, `storekit jobs rerun` (or the same command)
runs it again, and the mover resumes the journal where it stopped, even past the point where the
source was freed (the unit journal is looked up before the unit is checked again).

The work dir stays after the run: it is the job's record (`storekit jobs status`), reclaimed by
`layout clean` once idle past the scratch area's TTL, as a prepare work dir is. A drain never
runs as this job: the burst tier is node-local and an array element lands on whatever node Slurm
picks, and a plan made for a node-local tier only applies on the node that made it
(tier.plan._check_fresh); a drain on every node is a job step instead (storekit/tier/drainjob.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import xxhash

from storekit.config import SiteConfig
from storekit.errors import ExitCode, StorekitError, UsageError
from storekit.executors.base import DoneFn, ProgressFn
from storekit.jobdir import DONE, JobDir, remove_path
from storekit.layout.spec import load_layout
from storekit.store import Store
from storekit.tier.apply import apply_unit, plan_stores
from storekit.tier.kinds import KIND, WORK_DIR_PREFIX
from storekit.tier.mover import UnitResult, tier_root
from storekit.tier.moveunit import unit_journal
from storekit.tier.plan import TierPlan, load_plan, render_plan
from storekit.trusted_dirs import anchor_for


def job_dir_for(site: SiteConfig, plan_bytes: bytes, action: str) -> Path:
    """`scratch/storekit-tier-<action>-<plan digest>` on the shared POSIX tier of the journals
    (every node sees it; `jobs status` looks in each POSIX tier's scratch/)."""
    shared = _shared_tier(site)
    scratch = tier_root(shared) / "scratch"
    return scratch / f"{WORK_DIR_PREFIX}{action}-{xxhash.xxh3_64_hexdigest(plan_bytes)[:12]}"


def shared_scratch(site: SiteConfig) -> Path:
    """scratch/ of the shared POSIX tier, made as its layout makes it if missing: where tier jobs'
    work dirs go (a drain on every node's too: storekit/tier/drainjob.py)."""
    scratch = tier_root(_shared_tier(site)) / "scratch"
    _make_scratch(site, scratch)
    return scratch


def _shared_tier(site: SiteConfig) -> Any:
    for tier in site.tiers.values():
        if tier.scheme == "file" and tier.role != "burst":
            return tier
    raise UsageError("no shared POSIX tier for the job's work dir", hint="configure a tier of role parallel")


def create_job(plan: TierPlan, site: SiteConfig) -> TierJob:
    """The job of `plan`: its work dir made (private, in scratch/) and the plan written into it."""
    data = render_plan(plan, site)
    path = job_dir_for(site, data, plan.action)
    _make_scratch(site, path.parent)
    work = JobDir(path, anchor=anchor_for(path, [t.local_root for t in site.tiers.values() if t.local_root]))
    work.create()
    meta = {"action": plan.action, "output": f"tier {plan.action}", "units": len(plan.units)}
    work.write_plan(data, kind=KIND, tasks=len(plan.units), meta=meta)
    return TierJob(work, site)


def _make_scratch(site: SiteConfig, scratch: Path) -> None:
    """scratch/ as the tier's layout makes it (1777 by default: every user's jobs write there)."""
    if scratch.is_dir():
        return
    area = load_layout(_shared_tier(site).layout).area("scratch")
    scratch.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(scratch, 0o700)  # opened up below, once it is a directory this run made
    except FileExistsError:
        return
    os.chmod(scratch, area.mode if area is not None else 0o1777)


class TierJob:
    """A tier plan's units as the job layer's tasks (executors.base.Job)."""

    kind = KIND

    def __init__(self, work: JobDir, site: SiteConfig) -> None:
        self.work = work
        self.site = site
        self.plan = load_plan(work.read_plan(), str(work.plan_file), site)
        self._stores: dict[str, Store] | None = None

    @property
    def dir(self) -> JobDir:
        return self.work

    def task_cost(self, index: int) -> int:
        return self.plan.units[index].bytes

    def setup_process(self) -> None:
        pass

    def threads_per_process(self) -> int:
        return 64  # a move waits on storage, not on the GIL: one process, a thread per unit

    def stores(self) -> dict[str, Store]:
        if self._stores is None:
            self._stores = plan_stores(self.plan, self.site)
        return self._stores

    def runner(self, should_stop: Callable[[], bool]) -> _UnitRunner:
        return _UnitRunner(self)

    def finalize(self) -> dict[str, Any]:
        """What `jobs finalize` (the job after a `jobs rerun`) reports: every unit's outcome. The
        work dir stays (it is the job's record); a unit not done is exit 1, naming it."""
        results = job_results(self.work, self.plan)
        bad = [r for r in results if r.status == "failed"]
        if bad:
            raise StorekitError(
                f"{len(bad)} of {len(results)} unit(s) not moved, the first: {bad[0].action} "
                f"{bad[0].path}: {bad[0].reason}",
                hint=f"`storekit jobs rerun {self.work.path}` runs them again",
            )
        return {"status": f"moved {len(results)} units", "work_dir": str(self.work.path)}


class _UnitRunner:
    def __init__(self, job: TierJob) -> None:
        self.job = job

    def run(self, index: int, progress: ProgressFn, done: DoneFn) -> dict[str, Any] | None:
        job, work = self.job, self.job.work
        unit = job.plan.units[index]
        # a move of this unit that a kill stopped (perhaps after its source was freed, where the
        # plan's check would find it gone) is resumed by the mover from its journal
        resume = unit_journal(unit, site=job.site).load(tidy=False)
        result = apply_unit(job.plan, unit, job.site, job.stores(), check=not resume)
        progress(0, 0, result.bytes)
        if result.status == "failed":  # recorded, and the other units go on (as in a local run)
            code = result.exit_code or int(ExitCode.ERROR)
            work.record_failure(index, result.reason, exit_code=code, log=_element_log(work))
            return None
        record = {"task": index, "parts": {}, "result": result.to_dict()}
        tmp = work.new_task_dir(index)
        try:
            (tmp / DONE).write_text(json.dumps(record))  # phases in the order they ran
            work.commit_task(tmp, index)
        except BaseException:
            remove_path(tmp)
            raise
        work.clear_failure(index)
        done(index, record)
        return record

    def drain(self) -> None:
        pass


def _element_log(work: JobDir) -> str | None:
    """The Slurm log of the array element running here (what a failure record names), if any."""
    array, index = os.environ.get("SLURM_ARRAY_JOB_ID", ""), os.environ.get("SLURM_ARRAY_TASK_ID", "")
    if not (array.isdigit() and index.isdigit()):
        return None
    from storekit.slurm.run import element_log

    return element_log(os.environ, work, array, int(index))


def job_results(work: JobDir, plan: TierPlan) -> list[UnitResult]:
    """Each unit's result, in plan order: its completion record's, else its failure's, else not run."""
    scan = work.scan()
    results = []
    for index, unit in enumerate(plan.units):
        path = unit.dst_path if unit.action == "recall" else unit.src_path
        if index in scan.done:
            doc = dict(work.read_done(index)["result"])
            doc["not_owned"] = tuple(doc.get("not_owned", ()))
            results.append(UnitResult(**doc))
            continue
        failure = work.read_failure(index) if index in scan.failed else None
        if failure is not None:
            reason, code = str(failure["error"]), int(failure["exit_code"])
        else:
            reason, code = f"not run (see `storekit jobs status {work.path}`)", int(ExitCode.ERROR)
        results.append(
            UnitResult(path=path, action=unit.action, status="failed", reason=reason, exit_code=code)
        )
    return results


def load(path: Path, site: SiteConfig) -> TierJob:
    return TierJob(JobDir(path), site)
