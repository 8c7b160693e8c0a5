"""prepare's tasks as a job (storekit/executors/base.py): what any executor runs, here or on a node."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from storekit.config import SiteConfig
from storekit.executors.base import TaskRunner
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.plan import PrepPlan
from storekit.pipeline.task import TaskRunner as PrepTaskRunner
from storekit.pipeline.task import encoder_for
from storekit.pipeline.workdir import KIND, WorkDir, read_plan


class PrepareJob:
    kind = KIND

    def __init__(self, plan: PrepPlan, work: WorkDir, site: SiteConfig | None) -> None:
        self.plan = plan
        self.work = work
        self.site = site

    @property
    def dir(self) -> WorkDir:
        return self.work

    def task_cost(self, index: int) -> int:
        return self.plan.tasks[index].est_bytes

    def setup_process(self) -> None:
        # each thread encodes in itself: no tokenizer thread pool on top
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        os.environ["RAYON_NUM_THREADS"] = "1"

    def runner(self, should_stop: Callable[[], bool]) -> TaskRunner:
        fs, encoder = InputFS(self.site), encoder_for(self.plan)
        return PrepTaskRunner(
            self.plan, self.work, fs, encoder, background_commit=True, should_stop=should_stop
        )


def load(path: Path, site: SiteConfig | None) -> PrepareJob:
    """The job of an existing work dir (what `storekit jobs run-task` runs): its plan, read only."""
    work = WorkDir(path)
    return PrepareJob(read_plan(work), work, site)
