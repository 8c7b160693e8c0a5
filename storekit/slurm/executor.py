"""The `slurm` executor: a job's tasks as a Slurm array, for any job kind (executors/base.py).

Elements run `storekit jobs run-element WORKDIR` (run.py): each loads the job by the kind its
job.json names and runs what that kind registered for a node (`on_node`, executors/kinds.py), so
nothing here knows what a job does. Two ways to use it:

- `run()`, the interface every executor has: submit the array alone, wait until it has left the
  queue, and report as a local run does (the first failed task's error raised); the caller
  finalizes, as after a local run, and the elements finalize nothing.
- `plan()` + `submit()` (it is `detached`): the array and a finalize job after it; the command
  returns while they run, and the job's last element (or the finalize job) finalizes it. This is
  how `prepare dataset --executor slurm` submits (storekit/pipeline/submit.py).

A gang of processes that must run at once, one per node (bench io's agents), is no array: `step()`
starts it as one job step (step.py: in the caller's allocation, or in one srun asks for).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from storekit import faults
from storekit.errors import ExitCode, Interrupted, StorekitError
from storekit.executors.base import DoneFn, Job, ProgressFn, RunReport, SkipFn
from storekit.jobdir import JobDir
from storekit.slurm import commands
from storekit.slurm.batches import ClusterLimits
from storekit.slurm.step import Step, StepInfo, StepOptions, check_nodes, srun_command, start_step
from storekit.slurm.submit import SubmitPlan, Submitted, plan_submission, submit
from storekit.slurm.wait import look_interval
from storekit.slurmopts import SlurmOptions


@dataclass(frozen=True)
class SlurmExecutor:
    name = "slurm"
    detached = True

    options: SlurmOptions = field(default_factory=SlurmOptions)
    config: str | None = None  # the config file the jobs read (`storekit --config`)
    extra_args: tuple[str, ...] = ()  # more sbatch arguments (tests: --nodelist)

    def plan(
        self,
        work: JobDir,
        todo: Sequence[int],
        *,
        job_name: str,
        log_dir: Path,
        limits: ClusterLimits | None = None,
    ) -> SubmitPlan:
        """The scripts and element map for `todo` (what --dry-run prints); nothing is written."""
        return plan_submission(
            work, todo, job_name=job_name, log_dir=log_dir, options=self.options, config=self.config,
            limits=limits,
        )  # fmt: skip

    def submit(
        self,
        work: JobDir,
        plan: SubmitPlan,
        *,
        before_record: Callable[[], None] = lambda: None,
        refused: list[bool] | None = None,
        finalize: bool = True,
    ) -> Submitted:
        """Submit the array (and, with `finalize`, the finalize job after it); see submit.submit."""
        return submit(
            work, plan, extra_args=self.extra_args, before_record=before_record, refused=refused,
            finalize=finalize,
        )  # fmt: skip

    def step_command(self, opts: StepOptions, argv: Sequence[str]) -> list[str]:
        """The srun line `step()` runs (what --dry-run prints; no secret in it)."""
        return srun_command(opts, argv)

    def check_step(self, opts: StepOptions, cpus_wanted: int) -> int:
        """Refuse a step that cannot run (no srun or controller, too few nodes) before anything
        starts; the CPUs each of its processes may ask for."""
        return check_nodes(opts, cpus_wanted)

    def step(
        self,
        opts: StepOptions,
        argv: Sequence[str],
        env: Mapping[str, str],
        on_seen: Callable[[StepInfo], None] | None = None,
    ) -> Step:
        """`argv` on each of `opts.nodes` nodes at once, as one job step (`env` beside ours);
        `on_seen(info)` once Slurm runs it (its job and step id, its nodes)."""
        return start_step(opts, argv, env, on_seen)

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
        """Run `todo` as an array (each element's CPUs: the options', not `workers`, which counts
        this host's) and return once it has left the queue. Elements skip tasks already done; so
        `skip` is not asked here. Ctrl-C (or a stop signal) cancels the array."""
        report = RunReport()
        started = time.monotonic()
        if not todo:
            return report
        work = job.dir
        log_dir = Path(self.options.log_dir) if self.options.log_dir else work.path.parent / "storekit-logs"
        plan = self.plan(
            work, todo, job_name=self.options.job_name or job.kind, log_dir=log_dir / work.path.name
        )
        submitted = self.submit(work, plan, finalize=False)
        try:
            _wait_gone(submitted.array_job_id)
        except KeyboardInterrupt:
            commands.cancel([submitted.array_job_id])
            raise Interrupted(
                f"stopped: array job {submitted.array_job_id} cancelled; finished tasks are kept",
                hint="rerun the same command to resume",
            ) from None
        finally:
            report.seconds = time.monotonic() - started
        _collect(work, todo, report, on_done, submitted.array_job_id)
        return report


def _wait_gone(array_job_id: str) -> None:
    started = time.monotonic()
    while commands.queued([array_job_id]):
        faults.point("slurm.run-wait")
        time.sleep(look_interval(time.monotonic() - started))


def _collect(
    work: JobDir, todo: Sequence[int], report: RunReport, on_done: DoneFn | None, array: str
) -> None:
    """Count the tasks the array completed (each passed to `on_done`); raise the first failure."""
    missing = []
    for task in sorted(todo):
        if not work.is_done(task):
            missing.append(task)
            continue
        report.tasks_run += 1
        if on_done is not None:
            on_done(task, work.read_done(task))
    if not missing:
        return
    failure = next((f for t in missing if (f := work.read_failure(t)) is not None), None)
    if failure is not None:
        exc = StorekitError(f"task {failure['task']}: {failure['error']}", hint=f"log: {failure.get('log')}")
        exc.exit_code = ExitCode(int(failure["exit_code"]))
        raise exc
    raise StorekitError(
        f"array job {array} ended with {len(missing)} tasks not done (first: task {missing[0]})",
        hint=f"`storekit jobs status {work.path}` shows how its elements ended",
    )
