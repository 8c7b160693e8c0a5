"""What an executor runs (a `Job`: tasks of a plan in a `JobDir`) and the executors, by name.

A job's kind supplies the per-task code (`Job.runner`, registered by kind: kinds.py); an executor
decides where and how the tasks run. Both are plugins of the `Executor` interface, registered here
by name and chosen by name (`get_executor`): `local` (threads and forked processes of this host,
storekit/executors/local.py) and `slurm` (array jobs, storekit/slurm/executor.py). A `detached`
executor (slurm) can also hand a job to a scheduler and return while it runs (its `plan` and
`submit`): the job's own elements then finalize it. bench io's phases register their runners here too
(`phase_runner`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from storekit.errors import UsageError
from storekit.executors import kinds
from storekit.jobdir import JobDir

ProgressFn = Callable[[int, int, int], None]  # units of work since the last call (docs, tokens, bytes)
DoneFn = Callable[[int, dict[str, Any]], None]  # (task, its completion record) once it exists
SkipFn = Callable[[int], bool]  # true: the task needs no run (e.g. another run completed it)


class Stopped(BaseException):
    """A task given up between two steps because the run is stopping; its temp dir is removed."""


class TaskRunner(Protocol):
    """Runs tasks one after another in one thread; its completion records may commit later."""

    def run(self, index: int, progress: ProgressFn, done: DoneFn) -> Any: ...

    def drain(self) -> None:
        """Wait until every task run() returned for has its completion record (or raise)."""


class Job(Protocol):
    """A plan's tasks, as executors see them."""

    kind: str  # names fault points: f"{kind}.task-done"

    @property
    def dir(self) -> JobDir: ...

    def task_cost(self, index: int) -> int:
        """Relative size of a task: the largest run first, so the last ones finish together."""

    def setup_process(self) -> None:
        """Once in each process that runs tasks, before the first runner (e.g. thread env vars)."""

    def threads_per_process(self) -> int:
        """How many task threads may share one process: 1 where the GIL-held share of a task is
        large enough that threads would take turns on it (more processes then)."""

    def runner(self, should_stop: Callable[[], bool]) -> TaskRunner:
        """A runner for one thread; it stops between two steps once `should_stop()` is true."""


@dataclass
class RunReport:
    tasks_run: int = 0
    tasks_skipped: int = 0  # found done (by another run) right before starting: not run
    worker_peak_rss: list[int] = field(default_factory=list)  # of forked worker processes only
    seconds: float = 0.0


class Executor(Protocol):
    name: str
    # False: run() is the only way, in this command. True: also a `Scheduler` (submit and return)
    detached: bool

    def run(
        self,
        job: Job,
        todo: Sequence[int],
        *,
        workers: int,
        progress: ProgressFn,
        on_done: DoneFn | None = None,
        skip: SkipFn | None = None,
    ) -> RunReport:
        """Run the tasks in `todo`; raise the first task's error, or Interrupted on a stop signal.
        A task for which `skip(task)` is true right before it starts is counted skipped, not run."""
        ...


def default_workers() -> int:
    """CPUs this process may use: respects Slurm's and taskset's CPU masks."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# name -> "module:attribute" of a factory: imported only when asked for
_EXECUTORS: dict[str, str] = {}
# bench io's phase runners, by the executor that runs them: workers here, or one agent per node
_PHASE_RUNNERS: dict[str, str] = {
    "local": "storekit.bench.runner:PhaseRunner",
    "slurm": "storekit.bench.cluster.runner:ClusterRunner",
}


def register_executor(name: str, target: str) -> None:
    """`target(**settings) -> Executor`: what `get_executor(name)` makes."""
    _EXECUTORS[name] = target


register_executor("local", "storekit.executors.local:LocalExecutor")
register_executor("slurm", "storekit.slurm.executor:SlurmExecutor")


def register_phase_runner(name: str, target: str) -> None:
    _PHASE_RUNNERS[name] = target


def register_kind(name: str, target: str, **hooks: Any) -> None:
    """`target(path, site) -> Job` loads a job of kind `name` from its work dir; `hooks` are the
    other fields of kinds.JobKind (on_node, before_resubmit, dir_prefixes, locate)."""
    kinds.register(kinds.JobKind(name, target, **hooks))


def load_job(path: Path, site: Any) -> Job:
    """The job in work dir `path`, by the kind its job.json names (plan read and checked)."""
    kind = JobDir(path).header().kind
    job: Job = kinds.resolve(kinds.job_kind(kind).load)(path, site)
    return job


def on_node(job: Job) -> Job:
    """The job as an element on a scheduler's node runs it: its kind's `on_node` adapter, if any."""
    adapt = kinds.hook(job.kind, "on_node")
    if adapt is None:
        return job
    adapted: Job = adapt(job)
    return adapted


def executor_names() -> list[str]:
    return sorted(_EXECUTORS)


def get_executor(name: str, **settings: Any) -> Executor:
    """The executor registered as `name` (UsageError, exit 2, naming the known ones otherwise)."""
    made: Executor = _load(_EXECUTORS, name, "executor")(**settings)
    return made


def executor_for_option(name: str) -> Executor:
    """What `--executor NAME` names (UsageError, exit 2, listing the registered names otherwise)."""
    if name not in _EXECUTORS:
        raise UsageError(f"--executor {name!r}: expected {' or '.join(executor_names())}")
    return get_executor(name)


def phase_runner(name: str, *args: Any, **kwargs: Any) -> Any:
    """bench io's runner of one phase for `name` (see storekit/bench/runner.py for its shape)."""
    return phase_runner_type(name)(*args, **kwargs)


def phase_runner_type(name: str) -> Any:
    """The class `phase_runner(name)` makes (what its launch options are, before one is made)."""
    return _load(_PHASE_RUNNERS, name, "executor")


def phase_runner_names() -> list[str]:
    return sorted(_PHASE_RUNNERS)


def _load(table: dict[str, str], name: str, what: str) -> Any:
    target = table.get(name)
    if target is None:
        raise UsageError(f"unknown {what} {name!r} (known: {', '.join(sorted(table))})")
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
