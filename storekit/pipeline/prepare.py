"""`prepare_dataset`: spec -> plan -> (dry run | no-op | run tasks -> finalize), with timings.

This is the whole command minus the CLI: find inputs and the tokenizer, plan, check the output place
and free space, run the unfinished tasks on the local executor, finalize, remove the work dir.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storekit import faults
from storekit.config import SiteConfig
from storekit.diskspace import free_bytes, nearest_existing
from storekit.errors import NoSpaceError, StorekitError, UsageError
from storekit.executors.base import Executor, default_workers, get_executor
from storekit.executors.local import peak_rss
from storekit.lease import Lease
from storekit.manifest import Manifest
from storekit.paths import join_rel
from storekit.pipeline.areamodes import make_area
from storekit.pipeline.commit import check_existing, output_lease, settle_leftovers
from storekit.pipeline.engines import choose_engine, sample_documents
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.job import PrepareJob
from storekit.pipeline.kinds import WORK_DIR_PREFIX
from storekit.pipeline.location import DatasetLocation, resolve_location
from storekit.pipeline.plan import PrepPlan, plan_tasks
from storekit.pipeline.source_digests import hash_sources
from storekit.pipeline.sources import discover_sources
from storekit.pipeline.spec import PipelineSpec
from storekit.pipeline.tokenizer import load_tokenizer, resolve_tokenizer
from storekit.pipeline.workdir import WorkDir, remove_after_commit, tier_anchor
from storekit.units import format_bytes as format_size

if TYPE_CHECKING:
    from storekit.store import Store


@dataclass
class Progress:
    """What the CLI shows while tasks run; all callbacks are optional."""

    start: Callable[[int, int, int], None] = lambda total_bytes, tasks, done: None
    advance: Callable[[int, int, int], None] = lambda docs, tokens, nbytes: None
    finalizing: Callable[[], None] = lambda: None
    info: Callable[[str], None] = lambda message: None


@dataclass
class PrepareOutcome:
    status: str  # planned | unchanged | prepared
    plan: PrepPlan
    location: DatasetLocation
    work_dir: Path
    manifest: Manifest | None = None
    tasks_resumed: int = 0
    timings: dict[str, Any] = field(default_factory=dict)


def make_plan(
    spec: PipelineSpec, site: SiteConfig, fs: InputFS
) -> tuple[PrepPlan, DatasetLocation, WorkDir, dict[str, float]]:
    """The plan (its tokenizer engine chosen on a sample of the input), where it goes, its work dir,
    and how long choosing the engine took."""
    plan, location, work = draft_plan(spec, site, fs)
    plan, plan_timings = with_engine(spec, plan, fs)
    return plan, location, work, plan_timings


def draft_plan(
    spec: PipelineSpec, site: SiteConfig, fs: InputFS
) -> tuple[PrepPlan, DatasetLocation, WorkDir]:
    """The plan before its engine is chosen: its tasks, id and work dir are already final (the
    engine is not part of the plan id), so a Slurm submission can start from it."""
    location = resolve_location(spec.output_location, site, spec.tier)
    tokenizer = resolve_tokenizer(
        spec.tokenizer, eos=spec.eos, bos=spec.bos, eos_token=spec.eos_token, bos_token=spec.bos_token
    )
    sources = discover_sources(spec.inputs, forced_format=spec.input_format, text_key=spec.text_key, fs=fs)
    plan = plan_tasks(spec, sources, tokenizer)
    path = work_dir_for(spec, site, location, plan)
    return plan, location, WorkDir(path, anchor=tier_anchor(path, site))


def with_engine(spec: PipelineSpec, plan: PrepPlan, fs: InputFS) -> tuple[PrepPlan, dict[str, float]]:
    """`plan` with its tokenizer engine chosen on a sample of the input (the sample check), and how
    long that took."""
    started = time.monotonic()
    load_tokenizer(plan.tokenizer)  # checks what draft_plan read from tokenizer.json against the library
    chosen = choose_engine(
        spec.tokenizer_engine,
        plan.tokenizer,
        sample_documents(plan, fs),
        special_as_text=spec.special_tokens == "text",
    )
    return replace(plan, tokenizer=chosen), {"engine_choice_seconds": round(time.monotonic() - started, 3)}


def work_dir_for(spec: PipelineSpec, site: SiteConfig, location: DatasetLocation, plan: PrepPlan) -> Path:
    """--work-dir, else the output tier's scratch/, else the default tier's (S3 output), else refuse."""
    name = f"{WORK_DIR_PREFIX}{spec.name}-{spec.version}-{plan.plan_id[:12]}"  # kinds.py: jobs find it
    if spec.work_dir:
        return Path(spec.work_dir).expanduser().resolve() / name
    local = location.store.local_path(location.parent or "")
    if local is not None:
        if location.tier_name is None:
            return Path(local) / f".{name}"
        return Path(location.store.local_path(join_rel("scratch", name)) or "")
    default = site.tier(None)
    if default.scheme == "file":
        from storekit.store import open_store

        path = open_store(default).local_path(join_rel("scratch", name))
        if path:
            return Path(path)
    raise UsageError(
        f"the output {location.display} is on S3 and no POSIX tier is configured for task parts",
        hint="give --work-dir on a local or shared POSIX file system (e.g. node-local NVMe)",
    )


def prepare_dataset(
    spec: PipelineSpec,
    site: SiteConfig,
    *,
    force: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
    executor: Executor | None = None,
) -> PrepareOutcome:
    """`executor`: what runs the tasks (default: the local one)."""
    progress = progress or Progress()
    executor = executor or get_executor("local")
    started = time.monotonic()
    fs = InputFS(site)
    plan, location, work, plan_timings = make_plan(spec, site, fs)
    existing = check_existing(location, plan.plan_id, force=force, work=_if_present(work))
    outcome = PrepareOutcome(status="planned", plan=plan, location=location, work_dir=work.path)
    if dry_run:
        return outcome
    if existing is not None and not force:
        with contextlib.suppress(StorekitError, OSError), output_lease(location, work):
            settle_leftovers(location)  # what a run stopped after its commit left (best effort)
        return _unchanged(outcome, existing, work)
    check_space(plan, location, work)
    make_scratch_area(location.store, work.path)
    with output_lease(location, work) as lease:
        # under the lease: what a killed run left is settled, and the place is looked at again
        settle_leftovers(location)
        work.clear_tombstones()
        existing = check_existing(location, plan.plan_id, force=force, work=_if_present(work))
        if existing is not None and not force:
            return _unchanged(outcome, existing, work)
        with work.leased():
            _run(plan, work, location, spec, fs, force, progress, outcome, started, lease, executor)
            outcome.timings.update(plan_timings)
            faults.point("prepare.committed")
            remove_after_commit(work)
    return outcome


def make_scratch_area(store: Store, work_path: Path) -> None:
    """A work dir in a tier's scratch/ that does not exist yet: scratch/ is made as the tier's layout
    wants it (1777 in llm-cluster: every user's jobs write there), not with this process's umask, so
    what prepare creates passes `storekit layout check`."""
    scratch = store.local_path("scratch")
    if scratch is not None and work_path.parent == Path(scratch):
        make_area(store, "scratch", 0o1777)


def _if_present(work: WorkDir) -> WorkDir | None:
    return work if work.path.is_dir() else None


def _unchanged(outcome: PrepareOutcome, existing: Manifest, work: WorkDir) -> PrepareOutcome:
    if work.path.is_dir():
        # a finished dataset's leftover work dir (killed after the commit), unless a run holds it
        # or it is not ours to remove (best effort: the dataset is there either way)
        with contextlib.suppress(StorekitError), work.leased():
            work.remove()
    outcome.status, outcome.manifest = "unchanged", existing
    return outcome


def _run(
    plan: PrepPlan,
    work: WorkDir,
    location: DatasetLocation,
    spec: PipelineSpec,
    fs: InputFS,
    force: bool,
    progress: Progress,
    outcome: PrepareOutcome,
    started: float,
    lease: Lease,
    executor: Executor,
) -> None:
    """Tasks then finalize, in a work dir whose lease this process holds; fills `outcome`."""
    from storekit.pipeline.finalize import finalize  # numpy: not imported by planning (a Slurm submission)

    # what `jobs status DATASET` matches, and what `jobs finalize` needs beside the plan
    meta = {"output": location.display, "tier": spec.tier, "force": force}
    resumed = work.start(plan, fresh=force, meta=meta)  # --force rebuilds from scratch, finished tasks too
    done = work.done_tasks()
    todo = [t.index for t in plan.tasks if t.index not in done]
    outcome.tasks_resumed = len(done)
    if resumed:
        progress.info(f"resuming: {len(done)} of {len(plan.tasks)} tasks already done in {work.path}")
    digests = hash_sources(plan, fs)
    progress.start(sum(plan.tasks[i].est_bytes for i in todo), len(plan.tasks), len(done))
    workers = spec.workers or default_workers()
    t0 = time.monotonic()
    spent = {"encode": 0.0, "ids": 0.0, "total": 0.0}

    def task_done(index: int, summary: dict[str, Any]) -> None:
        for key in spent:
            spent[key] += float(summary.get(f"{key}_seconds" if key != "total" else "seconds", 0.0))

    job = PrepareJob(plan, work, fs.site)
    report = executor.run(job, todo, workers=workers, progress=progress.advance, on_done=task_done)
    t1 = time.monotonic()
    faults.point("prepare.tasks-done")
    progress.finalizing()
    manifest = finalize(plan, work, location, force=force, source_digests=digests.result, lease=lease)
    t2 = time.monotonic()
    stats = manifest.body["stats"]
    total = t2 - started
    outcome.status, outcome.manifest = "prepared", manifest
    rss = [peak_rss(), *report.worker_peak_rss]
    outcome.timings = {
        "seconds": round(total, 3),
        "tokenize_seconds": round(t1 - t0, 3),
        "finalize_seconds": round(t2 - t1, 3),
        "tokens_per_s": round(stats["tokens"] / total, 1) if total else 0.0,
        "docs_per_s": round(stats["docs_read"] / total, 1) if total else 0.0,
        "mb_per_s": round(stats["input_bytes"] / 1e6 / total, 3) if total else 0.0,
        "workers": workers,
        "worker_processes": len(report.worker_peak_rss),  # forked; 0: threads of this process
        "tasks_run": report.tasks_run,
        "peak_rss_bytes": sum(rss),
        "peak_rss_max_process_bytes": max(rss),
        "engine": plan.tokenizer.engine,
        # documents the fast engine left to `tokenizers` (characters unknown to this Python's Unicode)
        "engine_hf_documents": int(manifest.body["tokenizer"]["engine"].get("hf_documents", 0)),
        # split of the task time (summed over workers): the tokenizer itself, turning its ids into
        # arrays, everything else (read, parse, check, hash, write); commits run in the background
        "task_seconds": {
            "tokenizer": round(spent["encode"], 3),
            "ids_to_numpy": round(spent["ids"], 3),
            "read_parse_hash_write": round(spent["total"] - spent["encode"] - spent["ids"], 3),
        },
    }


def check_space(plan: PrepPlan, location: DatasetLocation, work: WorkDir) -> None:
    """Refuse up front (exit 6) when the estimated shards cannot fit; nothing is written yet."""
    estimate = plan.max_output_bytes  # the task parts hold as much again, until finalize is done
    work_dev, work_free = _device_and_free(work.path)
    needs = {work_dev: estimate}
    out_free = None
    out_local = location.store.local_path(location.parent) if location.store.capabilities.free_space else None
    if out_local is not None:
        out_dev, out_free = _device_and_free(Path(out_local))
        needs[out_dev] = needs.get(out_dev, 0) + estimate
    for dev, need in needs.items():
        free = work_free if dev == work_dev else out_free
        if free is not None and need > free:
            where = work.path if dev == work_dev else out_local
            raise NoSpaceError(
                f"not enough free space on {where}: the shards and task parts may need up to "
                f"{format_size(need)} (one token per input byte, the most a tokenizer makes), "
                f"{format_size(free)} is free",
                hint="free space, or write task parts elsewhere with --work-dir",
            )


def _device_and_free(path: Path) -> tuple[int, int | None]:
    probe = nearest_existing(str(path))
    return os.stat(probe).st_dev, free_bytes(probe)
