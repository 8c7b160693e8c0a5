"""`prepare dataset --executor slurm`: the --slurm-* options, submitting, and what it prints."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storekit.cli.output import Output
from storekit.options import Option, spec_values

if TYPE_CHECKING:
    from rich.console import Console

    from storekit.config import SiteConfig
    from storekit.executors.base import Executor
    from storekit.pipeline.spec import PipelineSpec
    from storekit.pipeline.submit import SlurmPrepareOutcome
    from storekit.slurmopts import SlurmOptions

_PANEL = "Slurm (--executor slurm)"


def _slurm(name: str, flag: str, field: str | None, help: str, **declared: Any) -> Option:
    """A --slurm-* option of `prepare dataset`, filling SlurmOptions.`field`."""
    return Option(name=name, flags=(flag,), field=field, help=help, panel=_PANEL, **declared)


# `--executor` and the --slurm-* options, in the order the help lists them
SLURM_OPTIONS: tuple[Option, ...] = (
    Option(
        name="executor",
        flags=("--executor",),
        default="local",
        metavar="local|slurm",
        help="local: this host's cores (default). slurm: submit the tasks as a job array and a "
        "finalize job that publishes the dataset; the command returns once they are queued "
        "(`storekit jobs status` follows them), or with --slurm-wait once it is published. "
        "Work dir, tokenizer, inputs and output must be on "
        "shared file systems.",
    ),
    _slurm("slurm_partition", "--slurm-partition", "partition", "Partition.", metavar="NAME"),
    _slurm("slurm_time", "--slurm-time", "time", "Time limit per array element.", metavar="TIME"),
    _slurm(
        "slurm_cpus",
        "--slurm-cpus",
        "cpus_per_task",
        "CPUs per element (its workers).",
        type=int,
        metavar="N",
    ),
    _slurm(
        "slurm_mem",
        "--slurm-mem",
        "mem",
        "Memory per element, e.g. 8G (sbatch --mem: Slurm's units, M if none).",
        metavar="SIZE",
    ),
    _slurm(
        "slurm_tasks_per_element",
        "--slurm-tasks-per-element",
        "tasks_per_element",
        "Plan tasks each array element runs (raised to fit MaxArraySize). Default: 1.",
        type=int,
        default=1,
        metavar="N",
    ),
    _slurm(
        "slurm_max_concurrent",
        "--slurm-max-concurrent",
        "max_concurrent",
        "Elements running at once (%N).",
        type=int,
        metavar="N",
    ),
    _slurm("slurm_account", "--slurm-account", "account", "Account.", metavar="NAME"),
    _slurm("slurm_qos", "--slurm-qos", "qos", "QOS.", metavar="NAME"),
    _slurm(
        "slurm_extra",
        "--slurm-extra",
        "extra",
        "A further #SBATCH line, e.g. --constraint=avx2 (repeatable).",
        type=list[str],
        metavar="OPTION",
    ),
    _slurm(
        "slurm_container",
        "--slurm-container",
        "container",
        "Run storekit through this, e.g. 'apptainer exec /img/sk.sif'.",
        metavar="PREFIX",
    ),
    _slurm(
        "slurm_setup",
        "--slurm-setup",
        "setup",
        "A shell line run first in each job, e.g. 'module load python'.",
        metavar="LINE",
    ),
    _slurm(
        "slurm_job_name",
        "--slurm-job-name",
        "job_name",
        "The array's job name (the finalize job's: fin-NAME). Default: <name>-<version>.",
        metavar="NAME",
    ),
    _slurm(
        "slurm_log_dir",
        "--slurm-log-dir",
        "log_dir",
        "Scripts and logs go to DIR/<work dir name>/. Default: the tier's logs/.",
        metavar="DIR",
    ),
    _slurm(
        "slurm_mem_per_cpu",
        "--slurm-mem-per-cpu",
        "mem_per_cpu",
        "Memory per CPU, e.g. 2G (sbatch --mem-per-cpu: Slurm's units, M if none).",
        metavar="SIZE",
    ),
    _slurm(
        "slurm_dependency",
        "--slurm-dependency",
        "dependency",
        "Start the array after this, e.g. afterok:1234.",
        metavar="DEP",
    ),
    _slurm(
        "slurm_no_requeue",
        "--slurm-no-requeue",
        None,  # SlurmOptions.requeue is its negation
        "Slurm may not requeue elements (preemption and node failure end them, the time "
        "limit with TIMEOUT and no USR1 notice; `storekit jobs rerun` resumes).",
        type=bool,
        default=False,
    ),
    _slurm(
        "slurm_wait",
        "--slurm-wait",
        None,
        "Return once the jobs have published the dataset (exit 0) or ended without it (exit 1), "
        "as sbatch --wait does; the jobs go on if this command is stopped.",
        type=bool,
        default=False,
    ),
)


def slurm_options(given: Mapping[str, Any]) -> SlurmOptions:
    """The SlurmOptions the --slurm-* options of `given` (by option name) make."""
    from storekit.slurmopts import SlurmOptions

    values = spec_values(SLURM_OPTIONS, given)
    fields = {o.field: values[o.name] for o in SLURM_OPTIONS if o.field}
    fields["extra"] = tuple(fields["extra"] or ())
    return SlurmOptions(**fields, requeue=not given["slurm_no_requeue"])


def submit_and_report(
    out: Output,
    spec: PipelineSpec,
    site: SiteConfig,
    executor: Executor,
    options: SlurmOptions,
    *,
    config: str | None,
    force: bool,
    dry_run: bool,
    wait: bool = False,
) -> None:
    from storekit.config import find_config_file
    from storekit.errors import UsageError
    from storekit.pipeline.spec import CLI_SOURCE
    from storekit.pipeline.submit import submit_prepare, wait_published
    from storekit.slurm.executor import SlurmExecutor
    from storekit.slurmopts import pipeline_slurm_table, with_site_defaults

    if spec.source != CLI_SOURCE:  # flags first, then the pipeline's [slurm], then the config's
        options = with_site_defaults(options, pipeline_slurm_table(Path(spec.source)))
    options = with_site_defaults(options, dict(site.slurm))
    found = find_config_file(config)
    cfg = str(found.resolve()) if found is not None else None
    if not isinstance(executor, SlurmExecutor):  # the --slurm-* options are its options
        raise UsageError(f"--executor {executor.name}: prepare submits a job with the --slurm-* options only")
    executor = replace(executor, options=options, config=cfg)
    outcome = submit_prepare(spec, site, executor=executor, force=force, dry_run=dry_run)
    if wait and outcome.status == "submitted" and outcome.submitted is not None:
        out.info(
            f"submitted array job {outcome.submitted.array_job_id}; waiting for the dataset "
            "(Ctrl-C stops waiting, not the jobs)"
        )
        wait_published(outcome)
    report(out, outcome)


def report(out: Output, outcome: SlurmPrepareOutcome) -> None:
    from storekit.pipeline.summary import plan_summary

    data: dict[str, Any] = {
        "status": outcome.status,
        "executor": "slurm",
        "dataset": outcome.location.display,
        "tier": outcome.location.tier_name,
        "path": outcome.location.rel,
        "plan": plan_summary(outcome.plan, work_dir=str(outcome.work_dir)),
        "tasks_done": outcome.tasks_done,
        "notes": outcome.notes,
    }
    sp = outcome.submit_plan
    if sp is not None:
        data["slurm"] = {
            "elements": sp.elements.elements,
            "tasks_per_element": sp.elements.per_element,
            "tasks": sp.elements.task_count,
            "max_array_size": sp.limits.max_array_size,
            "max_job_count": sp.limits.max_job_count,
            "log_dir": str(sp.log_dir),
            "array_script": str(sp.array_script_path),
            "finalize_script": str(sp.finalize_script_path),
            "sbatch": {"array": sp.array_script, "finalize": sp.finalize_script},
        }
    if outcome.submitted is not None:
        data["slurm"]["array_job_id"] = outcome.submitted.array_job_id
        data["slurm"]["finalize_job_id"] = outcome.submitted.finalize_job_id
    if outcome.manifest is not None and outcome.status == "prepared":
        from storekit.pipeline.summary import manifest_summary

        data["manifest"] = manifest_summary(outcome.manifest)
        data["waited_seconds"] = round(outcome.waited_seconds or 0.0, 3)

    def human(console: Console) -> None:
        for note in outcome.notes:
            console.print(f"note: {note}", markup=False)
        if outcome.status == "unchanged":
            console.print(
                f"{outcome.location.display}: already prepared; nothing to submit (--force rebuilds)"
            )
            return
        assert sp is not None
        if outcome.status == "planned":
            console.print(f"plan for {outcome.location.display} (dry run: nothing written or submitted)")
            console.print(f"--- {sp.array_script_path}", markup=False)
            console.print(sp.array_script, markup=False, end="")
            console.print(f"--- {sp.finalize_script_path} (--dependency=afterok:<array job>)", markup=False)
            console.print(sp.finalize_script, markup=False, end="")
            return
        sub = outcome.submitted
        assert sub is not None
        if outcome.status == "prepared":
            console.print(
                f"prepared {outcome.location.display}: array job {sub.array_job_id} "
                f"({sp.elements.elements} elements, {sp.elements.task_count} tasks), "
                f"published {outcome.waited_seconds or 0.0:.1f} s after submitting",
                markup=False,
            )
            return
        console.print(
            f"submitted {outcome.location.display}: array job {sub.array_job_id} "
            f"({sp.elements.elements} elements x {sp.elements.per_element} tasks, {sp.elements.task_count} "
            f"tasks; {outcome.tasks_done} already done), finalize job {sub.finalize_job_id} after it",
            markup=False,
        )
        console.print(f"logs: {sp.log_dir}", markup=False)
        console.print(f"follow: storekit jobs status {outcome.work_dir}", markup=False)

    out.result("prepare dataset", data, human)
