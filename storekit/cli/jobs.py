"""CLI for `storekit jobs`: where a job's tasks stand, and the entry points schedulers call."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from storekit.cli.common import (
    WORKERS_HELP,
    ConfigOpt,
    DryRunOpt,
    JsonOpt,
    QuietOpt,
    exit_codes,
    make_output,
    noun_app,
    site_config,
)
from storekit.errors import ExitCode, UsageError

WorkDirOpt = Annotated[
    str | None,
    typer.Option("--work-dir", metavar="DIR", help="Where the command that made the job put work dirs."),
]
WorkDirArg = Annotated[str, typer.Argument(metavar="WORKDIR", help="The job's work dir.")]
# --tier only places a tier-relative TARGET; without TARGET every POSIX tier's scratch/ is searched
TargetTierOpt = Annotated[
    str | None,
    typer.Option(
        "--tier",
        "-t",
        metavar="NAME",
        help="The tier a tier-relative TARGET is on. Default: $STOREKIT_TIER, else the config's "
        "default_tier. It picks no jobs: without TARGET, every POSIX tier's scratch/ is searched.",
    ),
]

STATUS_HELP = """Where each task of a job stands: done, running, failed or pending.

Read from the job's records alone (the work dir's tasks/ and failed/): a failed
task is named with its error, exit code, host and log file. TARGET is a job
work dir, a dataset a `prepare dataset` run is building (tier-relative path,
absolute path or s3:// URL), or nothing: every job in each POSIX tier's
scratch/ (and --work-dir) and the `bench io` runs across nodes in the state
dir's jobs/. Exit 0 whatever the tasks' state; 3 when TARGET names no job.

\b
Examples:
  storekit jobs status
  storekit jobs status datasets/text/web/v2 --json
  storekit jobs status /lustre/scratch/storekit-prepare-web-v2-0123abcd4567
"""


RERUN_HELP = """Resubmit only the failed or missing tasks of a Slurm job, then finalize.

TARGET is the job's work dir or the dataset it builds. Refused while elements
of the job are still queued or running (exit 5). A finalize job left waiting
on a dependency that can never be satisfied is cancelled. When every task is
done but the finalize job failed or was cancelled, only a finalize job is
submitted. --slurm-time, --slurm-mem and --slurm-partition replace what the
last submission asked for (after TIMEOUT or OUT_OF_MEMORY). A jsonl or text
input fixed since the plan is taken as it is now, when no finished task read
it; other changes need `prepare dataset` again.

\b
Examples:
  storekit jobs rerun datasets/text/web/v2
  storekit jobs rerun datasets/text/web/v2 --dry-run --json
  storekit jobs rerun datasets/text/web/v2 --slurm-time 4:00:00 \\
      --slurm-mem 16G
"""


def register(app: typer.Typer) -> None:
    jobs_app = noun_app("jobs", "Long-running jobs (prepare dataset, ...): task status and scheduler hooks.")
    E = ExitCode
    jobs_app.command("status", help=STATUS_HELP, epilog=exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND))(
        status_command
    )
    run_codes = exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.MISMATCH, E.RETRYABLE, E.NO_SPACE, E.INTERRUPTED)
    jobs_app.command("run-task", epilog=run_codes)(run_task_command)
    jobs_app.command("finalize", epilog=run_codes)(finalize_command)
    jobs_app.command("run-element", hidden=True, epilog=run_codes)(run_element_command)
    jobs_app.command("rerun", help=RERUN_HELP, epilog=exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.RETRYABLE))(
        rerun_command
    )
    app.add_typer(jobs_app)


def status_command(
    target: Annotated[str | None, typer.Argument(metavar="[TARGET]", help="Work dir or dataset.")] = None,
    work_dir: WorkDirOpt = None,
    tier: TargetTierOpt = None,
    per_task: Annotated[
        bool, typer.Option("--tasks", help="One row per failed task (default: one per error and log).")
    ] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    from storekit.jobdir import JobDir
    from storekit.jobs.find import find_job_dirs
    from storekit.jobs.status import job_status

    out = make_output(json_out, quiet)
    site = site_config(config)
    if tier is not None:
        site.tier(tier)  # an unknown --tier is an error (exit 3), not "no jobs"
    from storekit.errors import NotFoundError
    from storekit.pipeline.published import find_published
    from storekit.slurm.status import refine

    try:
        found = find_job_dirs(target, site, tier, work_dir)
    except NotFoundError:  # its job may be over: the dataset published, the work dir removed
        published = find_published(target, site, tier) if target is not None else None
        if published is None:
            raise

        def done(console: Console) -> None:
            jobs = ", ".join(published["jobs"]) or "?"
            where = published["path"] or published["dataset"]
            console.print(
                f"published: {where} at {published['finalized_at'] or '?'} "
                f"(Slurm jobs {jobs}; finalized by {published['finalized_by'] or '?'})",
                markup=False,
                soft_wrap=True,
            )

        out.result("jobs status", {"jobs": [], "published": published}, done)
        return
    statuses = [job_status(JobDir(p)) for p in found]
    slurm_views = [refine(st) for st in statuses]  # records first, then Slurm's view of open tasks

    def human(console: Console) -> None:
        if not statuses:
            console.print("no jobs")
        for st, view in zip(statuses, slurm_views, strict=True):
            c = st.counts()
            console.print(
                f"{st.path} ({st.header.kind}, {st.header.tasks} tasks): {c['done']} done, "
                f"{c['running']} running, {c['failed']} failed, {c['pending']} pending"
            )
            if view.get("error"):
                console.print(f"  Slurm not asked: {view['error']}", markup=False)
            for reason, n in sorted(view.get("pending_reasons", {}).items()):
                console.print(f"  pending in Slurm: {n} tasks ({reason})", markup=False)
            for fin in view.get("finalize", []):
                console.print(f"  finalize job {fin['job_id']}: {fin['state']} {fin['reason']}", markup=False)
            for sub in st.submissions:  # a job step (bench io's agents): its Slurm job and nodes
                if sub.extra.get("role") == "step":
                    nodes = ", ".join(sub.extra.get("nodes") or []) or "?"
                    console.print(f"  Slurm job {sub.job_id}: step {sub.extra.get('step_id')} on {nodes}",
                                  markup=False, soft_wrap=True)  # fmt: skip
            if st.result is not None and st.result.get("document"):
                console.print(f"  result: {st.result['document']}", markup=False, soft_wrap=True)
            for line in _node_lines(st.result or {}):  # a drain on every node: each node's outcome
                console.print(f"  {line}", markup=False, soft_wrap=True)
            if st.failures:
                rows = _failure_rows(st.states["failed"], st.failures, each=per_task)
                if not console.is_terminal:  # a pipe: one whole line per row, paths never cut
                    for span, code, host, error, log in rows:
                        line = f"  tasks {span}: exit {code} on {host}: {error} (log: {log})"
                        console.print(line, markup=False, soft_wrap=True)
                    continue
                table = Table("tasks", "exit", "host", "error", "log", box=None)
                for row in rows:
                    table.add_row(*row)
                console.print(table)

    docs = [{**st.to_dict(), "slurm": view} for st, view in zip(statuses, slurm_views, strict=True)]
    out.result("jobs status", {"jobs": docs}, human)


def _node_lines(result: dict[str, Any]) -> list[str]:
    from storekit.units import format_bytes

    lines = []
    for node in result.get("nodes") or []:
        if not isinstance(node, dict) or "state" not in node:
            continue  # bench io's result names its nodes only
        code = f", exit {node['exit_code']}" if node.get("exit_code") else ""
        lines.append(
            f"node {node.get('node') or '?'}: {node['state']}{code}: {node['units_moved']} units moved "
            f"({format_bytes(node['bytes_moved'])}), {node['units_skipped']} skipped, "
            f"{node['units_failed']} failed"
        )
    if lines and result.get("exit_code") is not None:
        lines.append(f"exit code {result['exit_code']}")
    return lines


def _failure_rows(failed: list[int], failures: dict[int, Any], *, each: bool) -> list[tuple[str, ...]]:
    """(tasks, exit, host, error, log): one row per task with `each`, else per same error and log."""
    from storekit.jobs.status import ranges

    groups: dict[tuple[str, ...], list[int]] = {}
    for index in failed:
        f = failures[index]
        key = (str(f.get("exit_code")), str(f.get("host")), str(f["error"]), str(f.get("log") or "-"))
        groups.setdefault((str(index), *key) if each else key, []).append(index)
    if each:
        return list(groups)
    return [(ranges(indexes), *key) for key, indexes in groups.items()]


def run_task_command(
    work_dir: WorkDirArg,
    tasks: Annotated[str, typer.Option("--task-ids", metavar="3,4,7-9", help="Plan tasks to run.")],
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            "-w",
            metavar="N",
            help=f"{WORKERS_HELP} in this element, one task each (threads). "
            "Default: $SLURM_CPUS_PER_TASK, else every core.",
        ),
    ] = None,
    log: Annotated[
        str | None, typer.Option("--log", metavar="FILE", help="Log file named in failure records.")
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Run tasks of a job's plan in its work dir (what a Slurm array element calls).

    Reads the plan, never rewrites it, takes no lock: tasks already done are
    skipped, each finished task's record appears whole, a failed task leaves a
    failure record. Exit: the first failed task's code; 130 when stopped.

    \b
    Examples:
      storekit jobs run-task /lustre/scratch/storekit-prepare-web-v2-0123 \\
          --task-ids 3,4,7-9
    """
    from storekit.interrupts import interrupt_on
    from storekit.jobs.run import run_tasks

    interrupt_on(signal.SIGTERM, signal.SIGUSR1)  # a stop keeps finished tasks, discards in-flight ones
    out = make_output(json_out, quiet)
    try:
        from storekit.jobs.status import parse_ranges

        indexes = parse_ranges(tasks)
    except ValueError as exc:
        raise UsageError(f"--task-ids: {exc}", hint="e.g. --task-ids 3,4,7-9") from None
    result = run_tasks(
        Path(work_dir), indexes, site_config(config), workers=workers or _slurm_cpus(), log=log
    )

    def human(console: Console) -> None:
        console.print(f"{result['run']} tasks run, {result['skipped']} already done")

    out.result("jobs run-task", result, human)


def _slurm_cpus() -> int | None:
    value = os.environ.get("SLURM_CPUS_PER_TASK", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def finalize_command(
    work_dir: WorkDirArg,
    log_dir: Annotated[
        str | None,
        typer.Option(
            "--log-dir",
            metavar="DIR",
            help="The job's Slurm log dir: when an element already finalized (a note there) and the "
            "work dir is gone, exit 0 saying so (what the finalize job storekit submits passes).",
        ),
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Finish a job whose tasks ran elsewhere (what a Slurm afterok job calls).

    prepare: checks every completion record, writes the shards and the manifest
    last, publishes the dataset and removes the work dir; publishes nothing
    while a task is not done (exit 1, naming the failed ones).

    \b
    Examples:
      storekit jobs finalize /lustre/scratch/storekit-prepare-web-v2-0123abcd4567
    """
    from storekit.executors.base import load_job
    from storekit.slurm.finalized import read_note, write_note

    out = make_output(json_out, quiet)
    note = None if Path(work_dir).is_dir() else read_note(log_dir, Path(work_dir))
    if note is not None:  # an element finalized inline and the work dir went: nothing left to do
        result = {**note, "status": f"already {note.get('status')}"}
    else:
        from storekit.jobdir import JobDir

        job = load_job(Path(work_dir), site_config(config))
        finish = getattr(job, "finalize", None)
        if finish is None:
            raise UsageError(f"{work_dir}: a {job.kind} job has no finalize step")
        jobs = [s.job_id for s in JobDir(Path(work_dir)).submissions()]
        result = finish()
        write_note(log_dir, Path(work_dir), result, f"job {os.environ.get('SLURM_JOB_ID', '?')}", jobs)

    def human(console: Console) -> None:
        console.print(f"{result['status']}: {result.get('dataset', work_dir)}")

    out.result("jobs finalize", result, human)


def run_element_command(
    work_dir: WorkDirArg,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Run this Slurm array element's tasks (what the sbatch script storekit writes execs).

    Which tasks: the submission in the work dir's jobs.json for $SLURM_ARRAY_JOB_ID,
    element $SLURM_ARRAY_TASK_ID. Workers: $SLURM_CPUS_PER_TASK. On USR1 (the
    notice before the time limit) it discards the task in flight, requeues this
    element (scontrol requeue ARRAYID_INDEX) and exits 0. On TERM (scancel,
    preemption, the time limit) it stops and exits 130: Slurm decides what
    follows (CANCELLED, requeued, TIMEOUT).

    \b
    Examples:
      # the last line of the array script storekit writes
      storekit jobs run-element /lustre/scratch/storekit-prepare-web-v2-0123
    """
    from storekit.slurm.run import run_element

    out = make_output(json_out, quiet)
    result = run_element(Path(work_dir), site_config(config))

    def human(console: Console) -> None:
        console.print(result.summary(), markup=False)

    out.result("jobs run-element", result.__dict__, human)


def rerun_command(
    target: Annotated[str, typer.Argument(metavar="TARGET", help="Work dir or dataset.")],
    work_dir: WorkDirOpt = None,
    tier: TargetTierOpt = None,
    slurm_time: Annotated[
        str | None,
        typer.Option("--slurm-time", metavar="TIME", help="A new time limit per element (after TIMEOUT)."),
    ] = None,
    slurm_mem: Annotated[
        str | None,
        typer.Option(
            "--slurm-mem",
            metavar="SIZE",
            help="New memory per element (after OUT_OF_MEMORY), e.g. 16G (sbatch --mem: Slurm's units, "
            "M if none).",
        ),
    ] = None,
    slurm_partition: Annotated[
        str | None, typer.Option("--slurm-partition", metavar="NAME", help="Another partition.")
    ] = None,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    from storekit.errors import NotFoundError
    from storekit.jobs.find import find_job_dirs
    from storekit.slurm.rerun import rerun

    out = make_output(json_out, quiet)
    site = site_config(config)
    found = find_job_dirs(target, site, tier, work_dir)
    if len(found) != 1:
        raise NotFoundError(f"{target}: {'no job' if not found else f'{len(found)} jobs'} found")
    changes = {"time": slurm_time, "mem": slurm_mem, "partition": slurm_partition}
    outcome = rerun(Path(found[0]), dry_run=dry_run, changes=changes)
    doc = outcome.to_dict()

    def human(console: Console) -> None:
        if outcome.cancelled:
            console.print(f"cancelled finalize job(s) {', '.join(outcome.cancelled)}", markup=False)
        for src in outcome.refreshed_sources:
            console.print(f"input {src} changed: the plan now records its new size and mtime", markup=False)
        if outcome.lone_finalize_job_id is not None:
            console.print(
                f"every task is done: submitted finalize job {outcome.lone_finalize_job_id}", markup=False
            )
        elif outcome.submitted is None:
            what = f"resubmit tasks {doc['tasks']}" if outcome.tasks else "submit a finalize job"
            console.print(f"would {what} of {doc['work_dir']} (dry run)", markup=False)
        else:
            console.print(
                f"resubmitted tasks {doc['tasks']} as array job {doc['array_job_id']}, "
                f"finalize job {doc['finalize_job_id']} after it",
                markup=False,
            )

    out.result("jobs rerun", doc, human)
