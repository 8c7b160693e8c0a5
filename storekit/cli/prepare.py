"""CLI for `storekit prepare dataset`: raw corpus -> tokenized Megatron shards + manifest."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from storekit.cli.common import (
    WORKERS_HELP,
    ConfigOpt,
    DryRunOpt,
    JsonOpt,
    QuietOpt,
    TierOpt,
    exit_codes,
    make_output,
    noun_app,
    site_config,
)
from storekit.cli.output import Output, ProgressHandle
from storekit.cli.prepare_slurm import (
    AccountOpt,
    ConcurrentOpt,
    ContainerOpt,
    CpusOpt,
    DependencyOpt,
    ExecutorOpt,
    ExtraOpt,
    JobNameOpt,
    LogDirOpt,
    MemOpt,
    MemPerCpuOpt,
    NoRequeueOpt,
    PartitionOpt,
    PerElementOpt,
    QosOpt,
    SetupOpt,
    TimeOpt,
    WaitOpt,
    slurm_options,
    submit_and_report,
)
from storekit.errors import ExitCode, UsageError
from storekit.exits import skip_teardown
from storekit.units import SIZE_HELP
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
    prepare_app.command("dataset", help=_HELP + EXAMPLES, epilog=codes)(prepare_dataset_command)
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


def prepare_dataset_command(
    pipeline: Annotated[
        str | None,
        typer.Argument(metavar="[PIPELINE.toml]", help="A pipeline file, or a bundled pipeline name."),
    ] = None,
    inputs: Annotated[
        list[str] | None,
        typer.Option(
            "--input",
            "-i",
            metavar="GLOB|DIR|FILE|s3://...",
            help="Input files (repeatable). Inside a directory or glob, symbolic links are followed only "
            "while they stay inside it; a link out is refused.",
        ),
    ] = None,
    input_format: Annotated[
        str | None,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="auto, jsonl, parquet, arrow, hf-disk or text. auto: by file extension "
            "(.jsonl/.json/.ndjson[.gz|.zst], .parquet, .arrow/.feather, a save_to_disk folder; "
            "anything else is a text file). Default: auto.",
        ),
    ] = None,
    text_key: Annotated[
        str | None, typer.Option("--text-key", help="Field/column holding the text. Default: text.")
    ] = None,
    keep_fields: Annotated[
        str | None,
        typer.Option(
            "--keep-fields",
            metavar="a,b",
            help="Fields copied to a per-shard metadata sidecar "
            "(<shard>.meta.jsonl, one line per document). For text files: path.",
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            metavar="PATH|NAME",
            help="tokenizer.json, a Hugging Face tokenizer folder, a "
            "hub name already in the local HF cache (never downloaded), or bundled:NAME.",
        ),
    ] = None,
    eos: Annotated[
        bool | None, typer.Option("--eos/--no-eos", help="Append EOS to each document. Default: on.")
    ] = None,
    bos: Annotated[
        bool | None, typer.Option("--bos/--no-bos", help="Prepend BOS to each document. Default: off.")
    ] = None,
    eos_token: Annotated[
        str | None, typer.Option("--eos-token", help="The EOS token, when it cannot be guessed.")
    ] = None,
    bos_token: Annotated[
        str | None, typer.Option("--bos-token", help="The BOS token, when it cannot be guessed.")
    ] = None,
    tokenizer_engine: Annotated[
        str | None,
        typer.Option(
            "--tokenizer-engine",
            metavar="auto|hf|tiktoken",
            help="auto (default): the compiled fast BPE engine where it gives the same ids as "
            "`tokenizers` (checked on a sample of the input), else `tokenizers`; hf: always "
            "`tokenizers`; tiktoken: the fast engine or exit 2.",
        ),
    ] = None,
    special_tokens: Annotated[
        str | None,
        typer.Option(
            "--special-tokens",
            metavar="match|text",
            help="A special token's text inside a document (e.g. a literal <|endoftext|>): match "
            "(default, as `tokenizers` does) makes it the special token; text encodes it as plain "
            "text. Occurrences are counted in the stats.",
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Dataset name. Default: the pipeline file's name.")
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option("--kind", metavar="text|code|multimodal", help="Dataset kind. Default: text."),
    ] = None,
    version: Annotated[str | None, typer.Option("--version", help="Dataset version. Default: v1.")] = None,
    tier: TierOpt = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="REL|ABS-PATH|URL",
            help="Where the dataset goes. Default: datasets/<kind>/<name>/<version> on the tier.",
        ),
    ] = None,
    shard_size: Annotated[
        str | None,
        typer.Option(
            "--shard-size",
            metavar="SIZE",
            help=f"Target .bin size per shard, e.g. 1G (default: 1GiB). {SIZE_HELP}",
        ),
    ] = None,
    shard_tokens: Annotated[
        int | None,
        typer.Option(
            "--shard-tokens", metavar="N", help="Target tokens per shard (instead of --shard-size)."
        ),
    ] = None,
    dedup: Annotated[
        bool | None,
        typer.Option(
            "--dedup/--no-dedup",
            help="Drop exact duplicates (xxh3-128 of the stripped text; first occurrence wins). Default: on.",
        ),
    ] = None,
    min_chars: Annotated[
        int | None, typer.Option("--min-chars", metavar="N", help="Drop documents shorter than N characters.")
    ] = None,
    max_chars: Annotated[
        int | None, typer.Option("--max-chars", metavar="N", help="Drop documents longer than N characters.")
    ] = None,
    max_doc_bytes: Annotated[
        str | None,
        typer.Option(
            "--max-doc-bytes",
            metavar="SIZE",
            help=f"Refuse single documents above this size (bad input). Default: 64MiB. {SIZE_HELP}",
        ),
    ] = None,
    holdout: Annotated[
        float | None,
        typer.Option(
            "--holdout",
            metavar="FRACTION",
            help="Fraction of documents for a held-out split, chosen by document hash (deterministic).",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            "-w",
            metavar="N",
            help=(
                f"{WORKERS_HELP} on this machine, one task and one core each (a forked process each "
                "with the fast engine, else threads of a few processes). Default: every core this "
                "process may run on. "
                "--executor slurm: each element runs --slurm-cpus workers."
            ),
        ),
    ] = None,
    on_error: Annotated[
        str | None,
        typer.Option(
            "--on-error",
            metavar="skip|fail",
            help="Bad records: skip and count them (default), or stop at the first, naming file and line.",
        ),
    ] = None,
    work_dir: Annotated[
        str | None,
        typer.Option(
            "--work-dir",
            metavar="DIR",
            help="POSIX directory for task parts and completion records. "
            "Default: scratch/ of the output tier.",
        ),
    ] = None,
    task_size: Annotated[
        str | None,
        typer.Option(
            "--task-size",
            metavar="SIZE",
            help=f"Input bytes per task. Default: chosen from the corpus size (1-64 MiB). {SIZE_HELP}",
        ),
    ] = None,
    executor: ExecutorOpt = "local",
    slurm_partition: PartitionOpt = None,
    slurm_time: TimeOpt = None,
    slurm_cpus: CpusOpt = None,
    slurm_mem: MemOpt = None,
    slurm_tasks_per_element: PerElementOpt = 1,
    slurm_max_concurrent: ConcurrentOpt = None,
    slurm_account: AccountOpt = None,
    slurm_qos: QosOpt = None,
    slurm_extra: ExtraOpt = None,
    slurm_container: ContainerOpt = None,
    slurm_setup: SetupOpt = None,
    slurm_job_name: JobNameOpt = None,
    slurm_log_dir: LogDirOpt = None,
    slurm_mem_per_cpu: MemPerCpuOpt = None,
    slurm_dependency: DependencyOpt = None,
    slurm_no_requeue: NoRequeueOpt = False,
    slurm_wait: WaitOpt = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Rebuild even if the dataset exists; replace a different committed dataset "
            "(only one below datasets/ on a configured tier; nothing else is ever replaced).",
        ),
    ] = False,
    allow_empty: Annotated[
        bool,
        typer.Option(
            "--allow-empty",
            help="Commit the dataset even when no document was kept (default: nothing is committed, exit 1).",
        ),
    ] = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    from storekit.executors.base import executor_for_option
    from storekit.pipeline.bundled import SAMPLE_PIPELINE, find_pipeline
    from storekit.pipeline.prepare import prepare_dataset
    from storekit.pipeline.spec import CLI_SOURCE, build_spec, load_pipeline_file

    out = make_output(json_out, quiet)
    site = site_config(config)
    overrides: dict[str, Any] = {
        "inputs": tuple(inputs) if inputs else None,
        "input_format": input_format,
        "text_key": text_key,
        "keep_fields": keep_fields,
        "tokenizer": tokenizer,
        "eos": eos,
        "bos": bos,
        "eos_token": eos_token,
        "bos_token": bos_token,
        "tokenizer_engine": tokenizer_engine,
        "special_tokens": special_tokens,
        "name": name,
        "kind": kind,
        "version": version,
        "tier": tier,
        "output": output,
        "shard_bytes": shard_size,
        "shard_tokens": shard_tokens,
        "dedup": dedup,
        "min_chars": min_chars,
        "max_chars": max_chars,
        "max_doc_bytes": max_doc_bytes,
        "holdout": holdout,
        "workers": workers,
        "on_error": on_error,
        "work_dir": work_dir,
        "task_bytes": task_size,
        "allow_empty": allow_empty or None,
    }
    if pipeline is None and not inputs and not tokenizer:
        pipeline = SAMPLE_PIPELINE
    if pipeline is not None:
        path = find_pipeline(pipeline)
        spec = build_spec(str(path), load_pipeline_file(path), overrides)
    else:
        derived = {"name": _name_from_input(inputs[0])} if inputs else {}
        spec = build_spec(CLI_SOURCE, derived, overrides)
    # the executor by name (registered in storekit/executors/base.py); a detached one (slurm)
    # submits the job and returns while it runs, with the --slurm-* options
    chosen = executor_for_option(executor)
    if workers is not None and chosen.detached:
        raise UsageError(
            f"--workers counts a local run's workers; with --executor {executor} give --slurm-cpus"
        )
    if slurm_wait and not chosen.detached:
        raise UsageError("--slurm-wait needs --executor slurm (a local run always waits)")
    if chosen.detached:
        options = slurm_options(
            partition=slurm_partition,
            time=slurm_time,
            cpus=slurm_cpus,
            mem=slurm_mem,
            per_element=slurm_tasks_per_element,
            max_concurrent=slurm_max_concurrent,
            account=slurm_account,
            qos=slurm_qos,
            extra=slurm_extra,
            container=slurm_container,
            setup=slurm_setup,
            job_name=slurm_job_name,
            log_dir=slurm_log_dir,
            mem_per_cpu=slurm_mem_per_cpu,
            dependency=slurm_dependency,
            no_requeue=slurm_no_requeue,
        )
        submit_and_report(
            out, spec, site, chosen, options, config=config, force=force, dry_run=dry_run, wait=slurm_wait
        )
        return
    with _progress(out) as progress:
        outcome = prepare_dataset(
            spec, site, force=force, dry_run=dry_run, progress=progress, executor=chosen
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
