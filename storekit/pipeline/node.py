"""prepare's job on a scheduler's node: what an array element (`storekit jobs run-element`) runs.

Registered as prepare's `on_node` hook (kinds.py). Apart from storekit/pipeline/submit.py (the
submitting side) so that an element imports only what its tasks need, not the planning, engine
choice and finalize code behind it (a few ms of every element's start-up, paid on the CPUs its
tasks need); the element that finalizes loads those then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from storekit.errors import StorekitError
from storekit.executors.base import Job, TaskRunner
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.job import PrepareJob
from storekit.pipeline.plan import PrepPlan
from storekit.pipeline.source_digests import hash_source, owned_sources
from storekit.pipeline.staging import check_sources, with_tokenizer_copy
from storekit.pipeline.workdir import WorkDir


def on_node(job: Job) -> Job:
    """prepare's job as an element runs it: the tokenizer copy, sources checked and hashed."""
    if not isinstance(job, PrepareJob):
        raise StorekitError(f"not a prepare job: {job.kind}")
    staged = with_tokenizer_copy(job.plan, job.work.path)
    return _NodePrepareJob(staged, job.work, job.site, plan_bytes=job.plan_bytes)


class _NodePrepareJob(PrepareJob):
    def runner(self, should_stop: Callable[[], bool]) -> TaskRunner:
        return _CheckedRunner(super().runner(should_stop), self.plan, self.work, InputFS(self.site))


class _CheckedRunner:
    def __init__(self, inner: TaskRunner, plan: PrepPlan, work: WorkDir, fs: InputFS) -> None:
        self.inner, self.plan, self.work, self.fs = inner, plan, work, fs

    def run(self, index: int, progress: Any, done: Any) -> Any:
        check_sources(self.plan, index, self.fs)
        for source in owned_sources(self.plan, index):
            hash_source(self.plan, source, self.work.path, self.fs)
        return self.inner.run(index, progress, done)

    def drain(self) -> None:
        self.inner.drain()
