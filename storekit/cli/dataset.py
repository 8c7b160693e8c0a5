"""CLI for `storekit dataset verify` and `storekit dataset info`."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console

from storekit.cli.common import ConfigOpt, JsonOpt, QuietOpt, TierOpt, make_output, site_config
from storekit.errors import ExitCode
from storekit.units import format_bytes as format_size

PathArg = Annotated[
    str,
    typer.Argument(
        metavar="PATH",
        help="The dataset: tier-relative (datasets/text/NAME/v1), an absolute local path, or s3://bucket/prefix.",
    ),
]


def register(app: typer.Typer) -> None:
    dataset_app = typer.Typer(
        name="dataset", help="Inspect and verify prepared datasets.", no_args_is_help=True
    )
    dataset_app.command("verify")(verify_command)
    dataset_app.command("info")(info_command)
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

    Examples:

      storekit dataset verify datasets/code/sample/v1

      storekit dataset verify s3://archive/storage/datasets/text/web/v2 --json
    """
    from storekit.pipeline.location import resolve_location
    from storekit.pipeline.verify import load_dataset_manifest, verify_dataset

    out = make_output(json_out, quiet)
    location = resolve_location(path, site_config(config), tier)
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
        raise typer.Exit(int(ExitCode.MISMATCH))


def info_command(
    path: PathArg,
    tier: TierOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Print the summary of a dataset's manifest: tokenizer, splits, shards, sizes and stats.

    Examples:

      storekit dataset info datasets/code/sample/v1

      storekit dataset info /lustre/storage/datasets/text/web/v2 --json
    """
    from storekit.pipeline.location import resolve_location
    from storekit.pipeline.summary import manifest_summary, render_manifest_summary
    from storekit.pipeline.verify import load_dataset_manifest

    out = make_output(json_out, quiet)
    location = resolve_location(path, site_config(config), tier)
    manifest = load_dataset_manifest(location)
    summary: dict[str, Any] = {"path": location.display, **manifest_summary(manifest)}
    summary["shard_list"] = manifest.body.get("shards", [])

    def human(console: Console) -> None:
        console.print(location.display)
        render_manifest_summary(console, summary)

    out.result("dataset info", summary, human)
