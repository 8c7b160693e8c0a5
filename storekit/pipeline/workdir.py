"""The work dir of one dataset build: a job work dir (storekit/jobdir.py) of kind "prepare".

    plan.json, job.json       the PrepPlan and its digest (what every task reads; a Slurm array task too)
    tasks/000012/             a completed task: parts + done.json (sizes and xxh3-128 of the parts,
                              which finalize checks); appears by rename, whole
    failed/, jobs.json, .storekit-lease   see storekit/jobdir.py

It lives on a POSIX file system (local NVMe, Lustre, NFS): parts are memory-mapped at finalize.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from storekit.config import SiteConfig
from storekit.errors import MismatchError, StorekitError
from storekit.jobdir import JobDir, JobHeader, io_errors
from storekit.pipeline.kinds import PREPARE
from storekit.pipeline.plan import PrepPlan
from storekit.trusted_dirs import anchor_for

KIND = PREPARE


class WorkDir(JobDir):
    def start(self, plan: PrepPlan, *, fresh: bool = False, meta: dict[str, Any] | None = None) -> bool:
        """Create or reuse the work dir for `plan` (`fresh`: drop finished tasks); True if some were kept."""
        self.create()
        resumed = False
        old = self._old_plan()
        if old is not None:
            same_inputs = [(s.url, s.size, s.mtime) for s in old.sources] == [
                (s.url, s.size, s.mtime) for s in plan.sources
            ]
            if old.plan_id == plan.plan_id and same_inputs and not fresh:
                resumed = bool(self.done_tasks())
            else:
                self.reset_tasks()
        elif self.done_tasks():
            self.reset_tasks()  # records of a plan nobody can name any more
        with io_errors(self.path):
            self.remove_temps()
        self.write_plan(plan.to_json(), kind=KIND, tasks=len(plan.tasks), meta=meta)
        return resumed

    def _old_plan(self) -> PrepPlan | None:
        try:
            return read_plan(self)
        except (StorekitError, ValueError, KeyError, TypeError):  # none, or not one we can resume
            return None

    def header(self) -> JobHeader:
        header = super().header()
        if header.kind != KIND:
            raise MismatchError(f"{self.header_file}: a {header.kind!r} job, not a prepare work dir")
        return header


def read_plan(work: JobDir) -> PrepPlan:
    return PrepPlan.from_json(work.read_plan())


def tier_anchor(path: Path, site: SiteConfig) -> Path | None:
    """What a work dir's parents are checked up to: its tier's root, else $HOME (trusted_dirs)."""
    return anchor_for(path, [t.local_root for t in site.tiers.values() if t.local_root])


def remove_after_commit(work: WorkDir) -> None:
    """The dataset is committed: a failure removing the work dir (a full disk) is not the run's
    failure; what is left is a tombstone or the dir, which the next run or `layout clean` removes."""
    with contextlib.suppress(StorekitError, OSError):
        work.remove()
