"""prepare's tasks as a job (storekit/executors/base.py): what any executor runs, here or on a node."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from storekit import faults
from storekit.config import SiteConfig, load_config
from storekit.errors import MismatchError, StorekitError
from storekit.executors.base import TaskRunner
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.plan import PrepPlan
from storekit.pipeline.source_digests import hash_sources
from storekit.pipeline.workdir import KIND, WorkDir, remove_after_commit, tier_anchor


class PrepareJob:
    kind = KIND

    def __init__(
        self, plan: PrepPlan, work: WorkDir, site: SiteConfig | None, *, plan_bytes: bytes | None = None
    ) -> None:
        self.plan = plan  # an element's names its staged tokenizer copy (pipeline/staging.py)
        self.work = work
        self.site = site
        # plan.json as it was read (or written): what the finalize compares the file with again
        self.plan_bytes = plan.to_json() if plan_bytes is None else plan_bytes

    @property
    def dir(self) -> WorkDir:
        return self.work

    def task_cost(self, index: int) -> int:
        return self.plan.tasks[index].est_bytes

    def setup_process(self) -> None:
        # each thread encodes in itself: no tokenizer thread pool on top
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        os.environ["RAYON_NUM_THREADS"] = "1"
        # the task code (numpy) before the local executor forks: its workers inherit it loaded
        import storekit.pipeline.task  # noqa: F401

    def threads_per_process(self) -> int:
        # the fast engine leaves ~22 % of a task's CPU in Python (splitting, normalising, ids to
        # arrays): two threads of one process would take turns on it, two processes do not
        return 1 if self.plan.tokenizer.engine == "tiktoken" else 2

    def runner(self, should_stop: Callable[[], bool]) -> TaskRunner:
        from storekit.pipeline.task import TaskRunner as PrepTaskRunner  # numpy: where tasks run
        from storekit.pipeline.task import encoder_for

        fs, encoder = InputFS(self.site), encoder_for(self.plan)
        return PrepTaskRunner(
            self.plan, self.work, fs, encoder, background_commit=True, should_stop=should_stop
        )

    def finalize(self) -> dict[str, Any]:
        return finalize_job(self)


def load(path: Path, site: SiteConfig | None) -> PrepareJob:
    """The job of an existing work dir (what `storekit jobs run-task` runs): its plan, read only."""

    work = WorkDir(path, anchor=tier_anchor(path, site or load_config(None)))
    raw = work.read_plan()
    return PrepareJob(PrepPlan.from_json(raw), work, site, plan_bytes=raw)


def finalize_job(job: PrepareJob) -> dict[str, Any]:
    """Publish the dataset of a work dir whose tasks ran elsewhere (a Slurm array): under the output
    lease and the work dir's, every completion record checked, manifest last; then the work dir goes.
    Nothing is published while a task is not done."""
    # here, not at import: of a Slurm array's elements only the last to finish finalizes
    from storekit.pipeline.commit import check_existing, output_lease, settle_leftovers
    from storekit.pipeline.finalize import finalize
    from storekit.pipeline.location import resolve_location
    from storekit.pipeline.source_digests import recorded_digests

    plan, work = job.plan, job.work
    meta = work.header().meta
    force = bool(meta.get("force", False))
    location = resolve_location(plan.output, job.site or load_config(None), meta.get("tier"))
    with output_lease(location, work) as lease:
        settle_leftovers(location)
        work.clear_tombstones()
        existing = check_existing(location, plan.plan_id, force=force, work=work)
        if existing is not None and not force:
            with work.leased():
                work.remove()  # finished before (a finalize killed after its commit, then rerun)
            return {"status": "unchanged", "dataset": location.display, "plan_id": plan.plan_id}
        with work.leased():
            # the plan was read by name before the work dir was held: read it again through the
            # descriptor, and every record that feeds the commit from there on. Its bytes are
            # compared, not the objects: an element's plan names its staged tokenizer copy
            if work.read_plan() != job.plan_bytes:
                raise MismatchError(
                    f"{work.plan_file}: changed while this finalize started",
                    hint=f"the work dir was changed behind storekit's back; remove {work.path} and rerun",
                )
            _check_all_done(work, len(plan.tasks))
            recorded = recorded_digests(plan, work.at(""))  # hashed by the tasks (Slurm elements)
            if recorded is not None:
                manifest = finalize(
                    plan, work, location, force=force, source_digests=lambda: recorded, lease=lease
                )
            else:
                digests = hash_sources(plan, InputFS(job.site))
                manifest = finalize(
                    plan, work, location, force=force, source_digests=digests.result, lease=lease
                )
            faults.point("prepare.committed")
            remove_after_commit(work)
    return {
        "status": "prepared",
        "dataset": location.display,
        "plan_id": plan.plan_id,
        "tokens": manifest.body["stats"]["tokens"],
        "tasks": len(plan.tasks),
    }


def _check_all_done(work: WorkDir, total: int) -> None:
    scan = work.scan()
    missing = [i for i in range(total) if i not in scan.done]
    if not missing:
        return
    failed = [i for i in missing if i in scan.failed]
    detail = f"{len(failed)} failed (first: task {failed[0]})" if failed else "none failed"
    raise StorekitError(
        f"{work.path}: {len(missing)} of {total} tasks are not done ({detail}); nothing was published",
        hint=f"see `storekit jobs status {work.path}`, run the missing tasks, then finalize again",
    )
