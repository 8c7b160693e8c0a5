"""CLI for `storekit prepare dataset`: raw corpus -> tokenized Megatron shards + manifest."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import typer

from storekit.cli.common import exit_codes, make_output, noun_app, site_config
from storekit.cli.declared import declared_command
from storekit.cli.output import Output, ProgressHandle
from storekit.cli.prepare_slurm import SLURM_OPTIONS, slurm_options, submit_and_report
from storekit.errors import ExitCode, UsageError
from storekit.exits import skip_teardown
from storekit.options import CONFIG, DRY_RUN, JSON, QUIET, Option, overrides
from storekit.pipeline.options import ALLOW_EMPTY, PIPELINE_OPTIONS
from storekit.units import format_bytes as format_size

if TYPE_CHECKING:
    from rich.console import Console  # rich loads only for human output: ~20 ms of start-up

    from storekit.pipeline.prepare import PrepareOutcome, Progress

# The pipeline is imported inside the command: every other command starts faster without it.

EXAMPLES = """

\b
Examples:
  # the bundled sample (CPython stdlib sources + a 65k BPE tokenizer)
  # into ./storage, offline
  storekit prepare dataset
  # a pipeline file (pipelines/sample.toml is the bundled sample's);
  # flags override its keys
  storekit prepare dataset pipelines/sample.toml --workers 2 --dry-run
  # everything by flags: jsonl.zst on S3 -> datasets/text/web/v2 on 'lustre'
  storekit prepare dataset -i 's3://raw/web/*.jsonl.zst' \\
      --tokenizer /models/llama3/ --name web --version v2 --tier lustre \\
      --shard-size 2GiB --holdout 0.005
  # a source tree, one document per file, keeping each file's path
  storekit prepare dataset -i ~/src/linux --format text --kind code \\
      --name linux --tokenizer tok.json --keep-fields path
  # as a Slurm job array on the cpu partition (prints the sbatch scripts)
  storekit prepare dataset pipelines/sample.toml --executor slurm \\
      --slurm-partition cpu --slurm-cpus 8 --slurm-time 2:00:00 --dry-run
"""


def register(app: typer.Typer) -> None:
    prepare_app = noun_app(
        "prepare", "Prepare training data: raw corpora -> tokenized, deduplicated, sharded datasets."
    )
    E = ExitCode
    codes = exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.RETRYABLE, E.NO_SPACE, E.INTERRUPTED)
    command = declared_command(PREPARE_TABLE, prepare_dataset_command)
    prepare_app.command("dataset", help=_HELP + EXAMPLES, epilog=codes)(command)
    app.add_typer(prepare_app)


_HELP = (
    "Tokenize a raw corpus into Megatron .bin/.idx shards with a manifest.json, under "
    "datasets/<kind>/<name>/<version>/ on a tier.\n\n"
    "Inputs: jsonl (plain, .gz, .zst), parquet, arrow/feather, `datasets` save_to_disk folders and plain "
    "text files (one document per file), as paths, globs, directories or s3:// URLs. Work is split finer "
    "than a file and runs on all cores; a killed run (SIGKILL, SIGTERM, SIGUSR1) resumes where it stopped "
    "when rerun, and the result is byte-identical whatever the number of workers. A rerun of a finished "
    "dataset does nothing. PIPELINE.toml is a pipeline file or a bundled pipeline's name; with no "
    "arguments, the bundled sample pipeline runs (pipelines/sample.toml)."
)


PIPELINE = Option(
    name="pipeline",
    argument=True,
    metavar="[PIPELINE.toml]",
    help="A pipeline file, or a bundled pipeline name.",
)
FORCE = Option(
    name="force",
    flags=("--force",),
    type=bool,
    default=False,
    help="Rebuild even if the dataset exists; replace a different committed dataset "
    "(only one below datasets/ on a configured tier; nothing else is ever replaced).",
)
# every option of `prepare dataset`, in the order its help lists them
PREPARE_TABLE = (
    PIPELINE,
    *(o for o in PIPELINE_OPTIONS if o is not ALLOW_EMPTY),
    *SLURM_OPTIONS,
    FORCE,
    ALLOW_EMPTY,
    DRY_RUN,
    JSON,
    QUIET,
    CONFIG,
)


def prepare_dataset_command(o: SimpleNamespace) -> None:
    """`prepare dataset` with what was given, one attribute per option of PREPARE_TABLE."""
    from storekit.executors.base import executor_for_option
    from storekit.pipeline.bundled import SAMPLE_PIPELINE, find_pipeline
    from storekit.pipeline.prepare import prepare_dataset
    from storekit.pipeline.spec import CLI_SOURCE, build_spec, load_pipeline_file

    out = make_output(o.json_out, o.quiet)
    site = site_config(o.config)
    given = overrides(PIPELINE_OPTIONS, vars(o))
    pipeline = o.pipeline
    if pipeline is None and not o.inputs and not o.tokenizer:
        pipeline = SAMPLE_PIPELINE
    if pipeline is not None:
        path = find_pipeline(pipeline)
        spec = build_spec(str(path), load_pipeline_file(path), given)
    else:
        derived = {"name": _name_from_input(o.inputs[0])} if o.inputs else {}
        spec = build_spec(CLI_SOURCE, derived, given)
    # the executor by name (registered in storekit/executors/base.py); a detached one (slurm)
    # submits the job and returns while it runs, with the --slurm-* options
    chosen = executor_for_option(o.executor)
    if o.workers is not None and chosen.detached:
        raise UsageError(
            f"--workers counts a local run's workers; with --executor {o.executor} give --slurm-cpus"
        )
    if o.slurm_wait and not chosen.detached:
        raise UsageError("--slurm-wait needs --executor slurm (a local run always waits)")
    if chosen.detached:
        options = slurm_options(vars(o))
        submit_and_report(
            out,
            spec,
            site,
            chosen,
            options,
            config=o.config,
            force=o.force,
            dry_run=o.dry_run,
            wait=o.slurm_wait,
        )
        return
    with _progress(out) as progress:
        outcome = prepare_dataset(
            spec, site, force=o.force, dry_run=o.dry_run, progress=progress, executor=chosen
        )
    _report(out, outcome)
    # committed and reported, every task thread and worker process ended: the interpreter's
    # teardown (freeing the tokenizer, ~0.1 s) would only keep the caller waiting
    skip_teardown()


def _name_from_input(ref: str) -> str:
    base = Path(ref.rstrip("/")).name
    for ch in "*?[":
        base = base.split(ch)[0]
    base = base.split(".")[0].strip("-_.") or Path(ref.rstrip("/")).parent.name
    # lowercase: the layout's dataset names are (MyCorpus.jsonl -> mycorpus)
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in base.lower()).strip("-_.") or "dataset"


class _progress:
    """Progress bar with docs/s, tokens/s, MB/s and ETA while tasks run (stderr; silent with --quiet)."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self._cm: Any = None
        self.handle: ProgressHandle | None = None

    def __enter__(self) -> Progress:
        from storekit.pipeline.prepare import Progress

        return Progress(
            start=self._start, advance=self._advance, finalizing=self._finalizing, info=self.out.info
        )

    def _start(self, total_bytes: int, tasks: int, done: int) -> None:
        if self.out.quiet:
            return
        self._cm = self.out.progress(
            f"tokenizing {tasks - done} task{'' if tasks - done == 1 else 's'}",
            total=max(total_bytes, 1),
            transfer=True,
            rates={"docs": "docs", "tokens": "tok"},
        )
        self.handle = self._cm.__enter__()

    def _advance(self, docs: int, tokens: int, nbytes: int) -> None:
        if self.handle is not None:
            self.handle.advance(nbytes, docs=docs, tokens=tokens)

    def _finalizing(self) -> None:
        self._close()
        self.out.info("writing shards and manifest ...")

    def _close(self) -> None:
        if self._cm is not None:
            cm, self._cm, self.handle = self._cm, None, None
            cm.__exit__(None, None, None)

    def __exit__(self, *exc: object) -> None:
        self._close()


def _report(out: Output, outcome: PrepareOutcome) -> None:
    from storekit.cli.dataset_tables import render_manifest_summary
    from storekit.pipeline.megatron import as_command_line, data_path_args, shard_prefixes
    from storekit.pipeline.summary import manifest_summary, plan_summary

    data: dict[str, Any] = {
        "status": outcome.status,
        "dataset": outcome.location.display,
        "tier": outcome.location.tier_name,
        "path": outcome.location.rel,
        "plan": plan_summary(outcome.plan, work_dir=str(outcome.work_dir)),
    }
    next_step = None
    if outcome.manifest is not None:
        data["manifest"] = manifest_summary(outcome.manifest)
        root = outcome.location.local_path() or outcome.location.display
        args = data_path_args(shard_prefixes(outcome.manifest.body, root))
        data["megatron_args"] = args
        next_step = as_command_line(args)
    if outcome.timings:
        data["timings"] = outcome.timings
        data["tasks_resumed"] = outcome.tasks_resumed

    if outcome.manifest is not None and not outcome.manifest.body["stats"]["docs_kept"]:
        out.warn("no documents were kept: every record was bad, filtered or a duplicate (see the stats)")

    def human(console: Console) -> None:
        if outcome.status == "planned":
            _render_plan(console, data["plan"], outcome.location.display)
            return
        if outcome.status == "unchanged":
            console.print(
                f"{outcome.location.display}: already prepared with the same inputs and options; "
                "nothing to do (--force rebuilds)"
            )
        else:
            console.print(f"prepared {outcome.location.display}")
        if outcome.manifest is not None:
            render_manifest_summary(console, data["manifest"])
        if outcome.timings:
            t = outcome.timings
            rss, rss_max = format_size(t["peak_rss_bytes"]), format_size(t["peak_rss_max_process_bytes"])
            console.print(
                f"time {t['seconds']:.1f}s  {t['tokens_per_s'] / 1e6:.2f} Mtok/s  "
                f"{t['docs_per_s']:.0f} docs/s  {t['mb_per_s']:.2f} MB/s  workers {t['workers']}  "
                f"peak RSS {rss} (max process {rss_max})"
            )
        if next_step:
            console.print("next: train on it with Megatron-LM or NeMo, giving them", markup=False)
            console.print(f"  {next_step}", markup=False, soft_wrap=True)

    out.result("prepare dataset", data, human)


def _render_plan(console: Console, plan: dict[str, Any], where: str) -> None:
    console.print(f"plan for {where} (dry run: nothing written)")
    from rich.table import Table

    table = Table("", "", show_header=False, box=None)
    for key in (
        "plan_id",
        "sources",
        "input_bytes",
        "tasks",
        "task_bytes",
        "estimated_tokens",
        "estimated_shards",
        "tokenizer",
        "work_dir",
    ):
        table.add_row(key, str(plan[key]))
    engine = plan["tokenizer_engine"]
    table.add_row("engine", f"{engine['name']}: {engine['reason']}")
    console.print(table)
    for src in plan["source_files"][:20]:
        console.print(
            f"  {src['path']}  {src['format']}{'.' + src['compression'] if src['compression'] else ''}  "
            f"{format_size(src['size'])}"
        )
    if len(plan["source_files"]) > 20:
        console.print(f"  ... and {len(plan['source_files']) - 20} more")
