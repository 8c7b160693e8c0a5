"""Options every command shares, and the glue from options to config, stores and output."""

from __future__ import annotations

from typing import Annotated

import typer

from storekit.cli.output import Output
from storekit.config import SiteConfig, load_config
from storekit.store import Store, open_store

JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="Print exactly one JSON document (with schema_version) on stdout."),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or informational logs.")]
ConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--config",
        "-c",
        metavar="FILE",
        help="Site config (storekit.toml). Default: $STOREKIT_CONFIG, then ./storekit.toml, "
        "then the embedded default (one local tier at ./storage).",
    ),
]
TierOpt = Annotated[
    str | None,
    typer.Option("--tier", "-t", metavar="NAME", help="Tier to act on. Default: the config's default_tier."),
]
DryRunOpt = Annotated[
    bool,
    typer.Option("--dry-run", "-n", help="Show the plan and change nothing, not even a state file."),
]


def make_output(json_mode: bool, quiet: bool) -> Output:
    return Output(json_mode=json_mode, quiet=quiet)


def site_config(config: str | None) -> SiteConfig:
    return load_config(config)


def tier_store(config: SiteConfig, tier: str | None, *, probe: bool = True) -> Store:
    store = open_store(config.tier(tier))
    if probe:
        store.probe()
    return store
