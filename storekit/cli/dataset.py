"""CLI for `storekit dataset verify` and `storekit dataset info`."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Any

import typer

from storekit.cli.common import (
    ConfigOpt,
    JsonOpt,
    QuietOpt,
    TierOpt,
    exit_codes,
    make_output,
    noun_app,
    site_config,
    tier_store,
)
from storekit.errors import ExitCode, MismatchError, UsageError
from storekit.units import format_bytes as format_size

if TYPE_CHECKING:
    from rich.console import Console  # rich loads only for human output

PathArg = Annotated[
    str,
    typer.Argument(
        metavar="PATH",
        help="The dataset: tier-relative (datasets/text/NAME/v1), an absolute local path, or s3://bucket/prefix.",
    ),
]


def register(app: typer.Typer) -> None:
    dataset_app = noun_app("dataset", "List, inspect, verify and blend prepared datasets.")
    E = ExitCode
    dataset_app.command("verify", epilog=exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.MISMATCH, E.RETRYABLE))(
        verify_command
    )
    dataset_app.command("info", epilog=exit_codes(E.USAGE, E.NOT_FOUND, E.RETRYABLE))(info_command)
    dataset_app.command("list", epilog=exit_codes(E.USAGE, E.NOT_FOUND, E.RETRYABLE))(list_command)
    dataset_app.command("inspect", epilog=exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.MISMATCH, E.RETRYABLE))(
        inspect_command
    )
    dataset_app.command("blend", epilog=exit_codes(E.USAGE, E.NOT_FOUND, E.RETRYABLE))(blend_command)
    app.add_typer(dataset_app)


def verify_command(
    path: PathArg,
    tier: TierOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Re-hash every shard against manifest.json and check each .idx against its .bin.

    Exit 0 when everything matches, 4 on any mismatch (listed), 3 when PATH holds no dataset.
    PATH is the dataset: tier-relative (datasets/text/NAME/v1), an absolute local path or
    s3://bucket/prefix.

    \b
    Examples:
      storekit dataset verify datasets/code/sample/v1
      storekit dataset verify s3://archive/storage/datasets/text/web/v2 --json
    """
    from storekit.pipeline.location import resolve_location
    from storekit.pipeline.verify import load_dataset_manifest, verify_dataset

    out = make_output(json_out, quiet)
    location = resolve_location(path, site_config(config), tier)
    if _archived_info(out, location):
        return
    manifest = load_dataset_manifest(location)
    report = verify_dataset(location, manifest)

    def human(console: Console) -> None:
        status = "OK" if report.ok else f"{len(report.problems)} PROBLEM(S)"
        console.print(
            f"{report.dataset}: {status} ({report.files} files, {report.shards} shards, "
            f"{format_size(report.bytes)} checked)"
        )
        for problem in report.problems:
            console.print(f"  {problem['path']}: {problem['problem']}")

    out.result("dataset verify", report.to_dict(), human)
    if not report.ok:
        first = report.problems[0]
        out.failed(
            int(ExitCode.MISMATCH),
            f"{report.dataset}: {len(report.problems)} problem(s), the first: "
            f"{first['path']}: {first['problem']}",
        )


def info_command(
    path: PathArg,
    tier: TierOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Print the summary of a dataset's manifest: tokenizer, splits, shards, sizes and stats.

    Reads manifest.json only; `storekit dataset verify` re-hashes the shards. PATH is the
    dataset: tier-relative (datasets/text/NAME/v1), an absolute local path or s3://bucket/prefix.

    \b
    Examples:
      storekit dataset info datasets/code/sample/v1
      storekit dataset info /lustre/storage/datasets/text/web/v2 --json
    """
    from storekit.cli.dataset_tables import render_manifest_summary
    from storekit.pipeline.location import resolve_location
    from storekit.pipeline.summary import manifest_summary
    from storekit.pipeline.verify import load_dataset_manifest

    out = make_output(json_out, quiet)
    location = resolve_location(path, site_config(config), tier)
    if _archived_info(out, location):
        return
    manifest = load_dataset_manifest(location)
    summary: dict[str, Any] = {"path": location.display, **manifest_summary(manifest)}
    summary["shard_list"] = manifest.body.get("shards", [])

    def human(console: Console) -> None:
        console.print(location.display)
        render_manifest_summary(console, summary)

    out.result("dataset info", summary, human)


def _archived_info(out: Any, location: Any) -> bool:
    """A dataset version that `storekit tier` moved away: its stub's state, and how to recall it."""
    from storekit.pipeline.catalog import stub_state
    from storekit.stubs import stub_rel

    if location.store.exists(location.rel) or not location.store.exists(stub_rel(location.rel)):
        return False
    stub = stub_state(location.store, location.rel)
    doc = {"path": location.display, "state": stub["state"], "stub": stub}

    def human(console: Console) -> None:
        if "to_tier" not in stub:
            console.print(f"{location.display}: {stub.get('problem')}", markup=False, soft_wrap=True)
            return
        console.print(
            f"{location.display}: {stub['state']} to tier {stub['to_tier']} ({stub['to_path']}) "
            f"at {stub['at']}, {format_size(int(stub['bytes']))} in {stub['files']} files",
            markup=False,
            soft_wrap=True,
        )
        console.print(f"recall it: {stub['recall']}", markup=False, soft_wrap=True)

    out.result("dataset info", doc, human)
    return True


def list_command(
    tier: TierOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Every dataset on a tier: kind, name, version, tokens, shards, tokenizer and state.

    Looks under datasets/<kind>/<name>/<version>/ and reads each manifest. State "ok": every file
    the manifest names is there with its size (a stat each); "incomplete": one is missing or has
    another size; "uncommitted": no manifest (half-written). `dataset verify` re-hashes the bytes.

    \b
    Examples:
      storekit dataset list
      storekit dataset list --tier lustre --json | jq -r '.datasets[].path'
    """
    from storekit.pipeline.catalog import list_datasets

    out = make_output(json_out, quiet)
    store = tier_store(site_config(config), tier)
    entries = list_datasets(store)

    def human(console: Console) -> None:
        if not entries:
            console.print(f"no datasets on {store.display_url}", markup=False)
            return
        from rich.table import Table

        table = Table(box=None, header_style="bold")
        for col in ("dataset", "state", "tokens", "docs", "shards", "size", "tokenizer"):
            table.add_column(col, justify="right" if col in ("tokens", "docs", "shards", "size") else "left")
        for e in entries:
            table.add_row(
                f"{e.kind}/{e.name}/{e.version}",
                e.state,
                "-" if e.tokens is None else f"{e.tokens:,}",
                "-" if e.documents is None else f"{e.documents:,}",
                "-" if e.shards is None else str(e.shards),
                "-" if e.bytes is None else format_size(e.bytes),
                e.tokenizer or "-",
            )
        console.print(table)
        for e in entries:
            if e.problem:
                console.print(f"{e.path}: {e.problem}", markup=False)
            elif e.stub is not None:
                where = f"tier {e.stub['to_tier']} ({e.stub['to_path']})"
                console.print(f"{e.path}: {e.state} to {where}; {e.stub['recall']}", markup=False)

    out.result(
        "dataset list",
        {"tier": store.name, "url": store.display_url, "datasets": [e.to_dict() for e in entries]},
        human,
    )


def inspect_command(
    path: PathArg,
    shard: Annotated[
        str | None,
        typer.Option("--shard", metavar="NAME", help="Shard to read, e.g. train-00001. Default: the first."),
    ] = None,
    docs: Annotated[int, typer.Option("--docs", metavar="N", help="Documents to decode.")] = 3,
    start: Annotated[
        int, typer.Option("--start", metavar="I", help="First document (0-based) in the shard.")
    ] = 0,
    max_chars: Annotated[
        int,
        typer.Option(
            "--show-chars", metavar="N", help="Show the first N characters of each document (0: all of it)."
        ),
    ] = 2000,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            metavar="PATH|NAME",
            help="Decode with this tokenizer instead of the one the manifest names (its xxh3 must match).",
        ),
    ] = None,
    tier: TierOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Decode documents of a shard back to text with the tokenizer the manifest names.

    Shows what training will see: the token ids read from the .bin through the .idx, decoded with
    the dataset's own tokenizer (refused with exit 4 when the tokenizer found is not the one the
    dataset was built with, by xxh3-128 of its tokenizer.json). PATH is the dataset: tier-relative
    (datasets/text/NAME/v1), an absolute local path or s3://bucket/prefix.

    \b
    Examples:
      storekit dataset inspect datasets/code/sample/v1
      storekit dataset inspect datasets/code/sample/v1 --shard train-00001 \\
          --start 10 --docs 1 --json
    """
    from storekit.pipeline.catalog import pick_shard, read_documents
    from storekit.pipeline.location import resolve_location
    from storekit.pipeline.tokenizer import load_tokenizer, resolve_tokenizer
    from storekit.pipeline.verify import load_dataset_manifest

    if docs < 1:
        raise UsageError("--docs must be at least 1")
    out = make_output(json_out, quiet)
    location = resolve_location(path, site_config(config), tier)
    if _archived_info(out, location):
        return
    manifest = load_dataset_manifest(location)
    entry = manifest.body.get("tokenizer") or {}
    info = resolve_tokenizer(tokenizer or str(entry.get("name")), eos=False, bos=False)
    if entry.get("xxh3_128") and info.xxh3_128 != entry["xxh3_128"]:
        raise MismatchError(
            f"tokenizer {info.file} (xxh3-128 {info.xxh3_128}) is not the one {location.display} was built "
            f"with ({entry['xxh3_128']})",
            hint="give the right one with --tokenizer",
        )
    decoder = load_tokenizer(info)
    chosen = pick_shard(manifest, shard)
    documents = []
    for index, ids in read_documents(location, chosen, start=start, count=docs):
        text = decoder.decode(ids, skip_special_tokens=False)
        cut = bool(max_chars) and len(text) > max_chars
        documents.append(
            {"index": index, "tokens": len(ids), "text": text[:max_chars] if cut else text, "truncated": cut}
        )

    def human(console: Console) -> None:
        console.print(f"{location.display}/{chosen['name']}  (tokenizer {info.name})", markup=False)
        for d in documents:
            more = f", first {max_chars} characters" if d["truncated"] else ""
            console.print(f"--- document {d['index']} ({d['tokens']} tokens{more}) ---", markup=False)
            console.print(d["text"], markup=False, highlight=False)

    out.result(
        "dataset inspect",
        {
            "dataset": location.display,
            "shard": chosen["name"],
            "tokenizer": info.name,
            "documents": documents,
        },
        human,
    )


def blend_command(
    datasets: Annotated[
        list[str],
        typer.Argument(
            metavar="DATASET[=WEIGHT]...", help="Datasets to mix; weights optional (default: by tokens)."
        ),
    ],
    fmt: Annotated[
        str,
        typer.Option(
            "--format", "-f", metavar="FORMAT", help="args, data-args, per-split or nemo (see above)."
        ),
    ] = "args",
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="Write it to FILE (atomically; an existing FILE needs --force).",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --output FILE.")] = False,
    tier: TierOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Mix prepared datasets into the data arguments Megatron-LM and NeMo take.

    Every shard becomes a Megatron prefix with a weight: by tokens, or the dataset's given weight
    spread over its shards by tokens. A held-out split becomes the validation data. Each DATASET is
    a path as for `dataset info`, optionally followed by =WEIGHT.

    \b
    Formats (--format):
      args       --data-path W P ... (--train-/--valid-data-path with a holdout)
      data-args  the W P ... list for Megatron-LM --data-args-path FILE
      per-split  JSON for Megatron-LM --per-split-data-args-path FILE
      nemo       JSON {train, validation, test} for NeMo model.data.data_prefix

    \b
    Examples:
      storekit dataset blend datasets/code/sample/v1
      storekit dataset blend datasets/text/web/v2=0.7 \\
          datasets/code/sample/v1=0.3 --format per-split -o blend.json
    """
    from storekit.metrics import write_textfile
    from storekit.pipeline.blend import BlendInput, blend_prefixes, parse_weighted, render, split_lists
    from storekit.pipeline.location import resolve_location
    from storekit.pipeline.verify import load_dataset_manifest

    out = make_output(json_out, quiet)
    site = site_config(config)
    if output and os.path.lexists(output) and not force:
        raise UsageError(f"{output} exists; give --force to replace it", hint="or choose another -o FILE")
    inputs = []
    seen: dict[str, str] = {}
    for ref in datasets:
        where, weight = parse_weighted(ref)
        location = resolve_location(where, site, tier)
        if location.display in seen:  # its shards twice: a weight the user did not mean
            raise UsageError(f"{ref} and {seen[location.display]} name the same dataset ({location.display})")
        seen[location.display] = ref
        manifest = load_dataset_manifest(location)
        inputs.append(BlendInput(location.local_path() or location.display, manifest, weight))
    prefixes = blend_prefixes(inputs)
    text = render(prefixes, fmt)
    if output:
        write_textfile(output, text + "\n")

    def human(console: Console) -> None:
        if output:
            shards = f"{len(prefixes)} shard{'' if len(prefixes) == 1 else 's'}"
            console.print(f"wrote {output} ({fmt}, {shards})", markup=False)
        else:
            console.print(text, markup=False, soft_wrap=True)

    out.result(
        "dataset blend",
        {"format": fmt, "text": text, "splits": split_lists(prefixes), "output": output},
        human,
        answer=not output,  # with -o FILE the file is the answer; --quiet prints nothing
    )
