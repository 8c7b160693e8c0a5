"""`prepare dataset --executor slurm`: submit the plan through the Slurm executor (array + finalize).

Submit (the login node): plan as a local run does, refuse node-local paths, submit the array, and
only then choose the engine (the sample check) and write the work dir (plan, tokenizer copy) while
Slurm schedules the array (Slurm 22.05 allocates on a 1-second tick): elements wait for the
submission record, which comes last; a failure before it cancels the array. Then the finalize job;
the command returns once Slurm has both. Nothing holds the output's lease meanwhile: the finalize
job takes it to commit, as a local run does.
On a node (`on_node` in storekit/pipeline/node.py, registered for the kind in kinds.py): the
tokenizer is the work dir's copy (its xxh3-128 checked), every task first checks its sources' size
and mtime, and the task holding a source's first piece hashes that source for the manifest
(sources/NNNNNN.json): the digests are computed by the elements, not by re-reading the corpus in
finalize (storekit/pipeline/source_digests.py). The finalize job is `storekit jobs finalize`
(storekit/pipeline/job.py): nothing is published unless every task is done.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from storekit.background import Background
from storekit.config import SiteConfig
from storekit.errors import BusyError, Interrupted, StorekitError, UnreachableError
from storekit.manifest import Manifest
from storekit.pipeline.areamodes import make_area
from storekit.pipeline.commit import check_existing
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.location import DatasetLocation
from storekit.pipeline.plan import PrepPlan
from storekit.pipeline.prepare import check_space, draft_plan, make_scratch_area, with_engine
from storekit.pipeline.spec import PipelineSpec
from storekit.pipeline.staging import copy_tokenizer
from storekit.pipeline.workdir import WorkDir
from storekit.slurm import commands
from storekit.slurm.batches import ClusterLimits, limits_from_config
from storekit.slurm.executor import SlurmExecutor
from storekit.slurm.shared import all_on_this_host, refuse_node_local
from storekit.slurm.submit import EXECUTOR, SubmitPlan, Submitted


@dataclass
class SlurmPrepareOutcome:
    status: str  # planned | unchanged | submitted
    plan: PrepPlan
    location: DatasetLocation
    work_dir: Path
    submit_plan: SubmitPlan | None = None
    submitted: Submitted | None = None
    manifest: Manifest | None = None
    tasks_done: int = 0
    notes: list[str] = field(default_factory=list)
    waited_seconds: float | None = None  # --slurm-wait: from the submission to the dataset published


def log_dir_for(work: Path, location: DatasetLocation | None = None, chosen: str | None = None) -> Path:
    """Where the scripts and element logs go, never inside the work dir (finalize removes it):
    `<--slurm-log-dir>/<work dir name>/`, else `logs/<work dir name>/` of the tier whose scratch/
    holds the work dir, else of the output's tier, else `storekit-logs/<work dir name>/` beside the
    work dir (a --work-dir outside any tier)."""
    if chosen:
        return Path(chosen).expanduser().absolute() / work.name
    if work.parent.name == "scratch" and (work.parent.parent / "logs").is_dir():
        return work.parent.parent / "logs" / work.name
    local = location.store.local_path("logs") if location is not None else None
    if local and (Path(local).is_dir() or _under_tier(work, location)):
        return Path(local) / work.name  # a missing logs/ is made with the layout's mode (make_areas)
    return work.parent / "storekit-logs" / work.name


def _under_tier(work: Path, location: DatasetLocation | None) -> bool:
    root = location.store.local_path("") if location is not None else None
    return root is not None and work.is_relative_to(Path(root))


def make_areas(location: DatasetLocation, work: Path, log_dir: Path) -> None:
    """The tier's scratch/ and logs/ a submission is first to need, with the layout's modes (1777,
    2775 in llm-cluster) instead of the umask's: what storekit writes passes `layout check`."""
    store = location.store
    make_scratch_area(store, work)
    logs = store.local_path("logs")
    if logs is not None and log_dir.parent == Path(logs):
        make_area(store, "logs", 0o2775)


def submit_prepare(
    spec: PipelineSpec,
    site: SiteConfig,
    *,
    executor: SlurmExecutor,
    force: bool = False,
    dry_run: bool = False,
) -> SlurmPrepareOutcome:
    """Submit `spec`'s plan through `executor` (the `slurm` executor with its options and config)."""
    options = executor.options
    options.check()
    fs = InputFS(site)
    probes = _probe_cluster(options.partition)  # Slurm answers while the plan is drafted
    plan, location, work = draft_plan(spec, site, fs)
    present = work if work.path.is_dir() else None
    existing = check_existing(location, plan.plan_id, force=force, work=present)
    outcome = SlurmPrepareOutcome(status="planned", plan=plan, location=location, work_dir=work.path)
    limits = _cluster(site, plan, location, work, probes, outcome, dry_run)
    if existing is not None and not force:
        outcome.status, outcome.manifest = "unchanged", existing
        return outcome
    done = work.done_tasks() if present is not None and not force else set()
    todo = [t.index for t in plan.tasks if t.index not in done]
    outcome.tasks_done = len(done)
    # squeue's NAME column shows 8 characters: the dataset first, not "storekit" for every job
    name = options.job_name or f"{spec.name}-{spec.version}"
    outcome.submit_plan = executor.plan(
        work, todo, job_name=name, log_dir=log_dir_for(work.path, location, options.log_dir), limits=limits
    )
    forced = spec.tokenizer_engine == "tiktoken"  # it may refuse the tokenizer: before submitting
    if dry_run or forced:
        outcome.plan, _ = with_engine(spec, plan, fs)
    if dry_run:
        return outcome
    check_space(plan, location, work)

    def write_work_dir() -> None:
        # after the array's sbatch: the sample check and these writes run while Slurm schedules it
        if not forced:
            outcome.plan, _ = with_engine(spec, plan, fs)
        meta = {"output": location.display, "tier": spec.tier, "force": force, "executor": EXECUTOR}
        work.start(outcome.plan, fresh=force, meta=meta)
        copy_tokenizer(outcome.plan, work.path)

    make_areas(location, work.path, outcome.submit_plan.log_dir)
    refused: list[bool] = []
    try:
        with work.leased():
            _refuse_if_queued(work)
            outcome.submitted = executor.submit(
                work, outcome.submit_plan, before_record=write_work_dir, refused=refused
            )
    except StorekitError:
        if refused and present is None:  # sbatch refused the array: leave no empty work dir behind
            with contextlib.suppress(OSError, StorekitError):
                work.remove()
        raise
    outcome.status = "submitted"
    return outcome


def wait_published(outcome: SlurmPrepareOutcome) -> None:
    """Wait for a submitted job to publish (status "prepared", its manifest) or raise (exit 1).
    Ctrl-C stops the waiting only: the jobs stay queued (exit 130, `jobs status` follows them)."""
    from storekit.slurm.wait import wait_for_jobs  # not on the nodes

    sub = outcome.submitted
    assert sub is not None
    ids = [sub.array_job_id, sub.finalize_job_id]
    try:
        waited = wait_for_jobs(outcome.work_dir, ids)
    except KeyboardInterrupt:
        raise Interrupted(
            f"stopped waiting; jobs {', '.join(ids)} go on",
            hint=f"follow them with `storekit jobs status {outcome.work_dir}`",
        ) from None
    manifest = None
    if waited.finished:
        manifest = check_existing(outcome.location, outcome.plan.plan_id, force=False, work=None)
    if manifest is None:
        raise ended_without_publishing(outcome.work_dir, ids)
    outcome.status, outcome.manifest, outcome.waited_seconds = "prepared", manifest, waited.seconds


def _cluster(
    site: SiteConfig,
    plan: PrepPlan,
    location: DatasetLocation,
    work: WorkDir,
    probes: Callable[[], tuple[dict[str, str], list[str]]],
    outcome: SlurmPrepareOutcome,
    dry_run: bool,
) -> ClusterLimits:
    """The cluster's limits, after refusing node-local paths; a dry run without Slurm uses defaults."""
    try:
        config, addresses = probes()
        limits = limits_from_config(config)
        single_host = all_on_this_host(addresses)
    except UnreachableError as exc:
        if not dry_run:
            raise
        outcome.notes.append(f"Slurm not reachable ({exc.message}): Slurm's default limits assumed")
        return limits_from_config({})
    paths = [("work dir", str(work.path)), ("tokenizer", plan.tokenizer.file)]
    paths += [("input", s.url) for s in plan.sources if fs_local(s.url)]
    out_local = location.local_path()
    if out_local:
        paths.append(("output", str(out_local)))
    refuse_node_local(paths, site, single_host=single_host)
    return limits


def _probe_cluster(partition: str | None) -> Callable[[], tuple[dict[str, str], list[str]]]:
    """`scontrol show config` and the partition's node addresses, asked in the background (a few ms
    each, mostly waiting for the controller) while the plan is drafted: the array's sbatch, whose
    scheduling tick every run waits for, comes that much sooner. The returned call waits for both
    answers and raises what either raised."""
    config = Background(commands.show_config, "storekit-slurm-config")
    addresses = Background(lambda: commands.node_addresses(partition), "storekit-slurm-nodes")
    return lambda: (config.result(), addresses.result())


def fs_local(url: str) -> bool:
    return url.startswith("/")


def _refuse_if_queued(work: WorkDir) -> None:
    """One submission of a work dir at a time: its earlier jobs must have left the queue."""
    ids = [s.job_id for s in work.submissions() if s.executor == EXECUTOR]
    queued = commands.queued(ids) if ids else []
    if queued:
        raise BusyError(
            f"{work.path} is already submitted: job {queued[0].array_job_id} is {queued[0].state.lower()}",
            hint=f"see `storekit jobs status {work.path}`; cancel it with scancel before submitting again",
        )


def ended_without_publishing(work: Path, job_ids: Sequence[str]) -> StorekitError:
    return StorekitError(
        f"Slurm jobs {', '.join(job_ids)} ended without publishing the dataset",
        hint=f"`storekit jobs status {work}` names failed tasks and their logs; "
        f"`storekit jobs rerun {work}` resubmits them",
    )
