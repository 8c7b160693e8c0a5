"""Options every command shares, and the glue from options to config, stores and output."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
import typer._click
import typer._click._textwrap
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from storekit.cli import values  # noqa: F401  (values converted as Click did, without pydantic)
from storekit.cli.declared import typer_info
from storekit.cli.output import Output, quiet_run, set_closing_warning, set_config_source
from storekit.config import EMBEDDED_SOURCE, ENV_CONFIG, SiteConfig, config_search_path, load_config
from storekit.errors import EXIT_CODE_TABLE, ExitCode
from storekit.options import CONFIG, DRY_RUN, JSON, QUIET, TIER
from storekit.options import WORKERS_HELP as WORKERS_HELP  # what --workers counts, for every command
from storekit.store import Store, open_store

# Plain help, not rich panels: rich reads `[plot]` as markup and cuts option names at 80 columns.
HELP_SETTINGS: dict[str, object] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _Wrapper(typer._click._textwrap.TextWrapper):
    """Help is wrapped between words only: `llm-cluster` and `--shard-size` are never split at a hyphen
    (Typer's help formatter takes its wrapper from its copy of Click's _textwrap on each call; Typer
    offers no setting for it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["break_on_hyphens"] = False
        super().__init__(*args, **kwargs)


typer._click._textwrap.TextWrapper = _Wrapper  # type: ignore[misc]

# what typer.main.get_command builds: a group (`storekit`, `layout`, ...) or one command
Command = TyperGroup | TyperCommand
# what their methods (parse_args, ...) are given: typer.Context's base, in Typer's own copy of Click
CommandContext = typer._click.Context


def _argument_usage(self: TyperArgument, ctx: CommandContext) -> list[str]:
    """An argument in a usage line as storekit always wrote it (Click's way): its metavar as given,
    else `NAME`, `[NAME]` when optional, `...` when it takes several; not Typer 0.29's `{NAME}`."""
    if self.metavar is not None:
        return [self.metavar]
    shown = self.name.upper() if self.required else f"[{self.name.upper()}]"
    return [shown + ("..." if self.nargs != 1 else "")]


def _no_argument_type(self: TyperArgument, ctx: CommandContext) -> str | None:
    """The help lists an argument by its name and help (`PATH  The dataset...`), without the Python
    type Typer 0.29 appends (`PATH <str>`): options show a metavar saying what to give instead."""
    return None


TyperArgument.get_usage_pieces = _argument_usage  # type: ignore[method-assign]
TyperArgument.display_type_rich = _no_argument_type  # type: ignore[method-assign,assignment]

_METAVARS = {"<int>": "N", "<float>": "NUM"}


def tidy_options(command: Command) -> Command:
    """One convention for every option of the tree: a metavar that says what to give (N, NUM, or the
    option's own last word, never Typer's <str>/<int>/<float>), and a default said once (an option
    whose help states its default shows no second `[default: ...]`)."""
    ctx = typer.Context(command)
    renamed: dict[str, str] = {}
    for param in command.params:
        if not isinstance(param, TyperOption):
            continue
        for old in [o for o in param.opts if RENAMED.get(o) in param.opts]:
            param.opts.remove(old)  # help shows the one name; the old one still parses, with a warning
            renamed[old] = RENAMED[old]
        if param.help and "Default" in param.help:
            param.show_default = False
        if param.is_flag or param.metavar is not None:
            continue
        shown = param.display_type(ctx)
        if shown in _METAVARS or shown == "<str>":
            long = max(param.opts, key=len).lstrip("-")
            param.metavar = _METAVARS.get(shown) or long.split("-")[-1].upper()
    if renamed:
        _accept_old_names(command, renamed)
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            assert isinstance(sub, TyperGroup | TyperCommand)
            tidy_options(sub)
    return command


# old spelling -> the one name an option now has everywhere; an option declared with both keeps the
# old one working for scripts, hidden from help, with a warning on stderr
RENAMED = {
    "--partition": "--slurm-partition",
    "--time-limit": "--slurm-time",
    "--account": "--slurm-account",
}


def _accept_old_names(command: Command, renamed: dict[str, str]) -> None:
    parse_args = command.parse_args

    def parse_with_old_names(ctx: CommandContext, args: list[str]) -> list[str]:
        quiet = "-q" in args or "--quiet" in args
        given = list(args)
        for i, arg in enumerate(given):
            if arg == "--":
                break
            name, eq, value = arg.partition("=")
            if name in renamed:
                given[i] = renamed[name] + eq + value
                if not quiet:
                    typer.echo(f"warning: {name} is deprecated; use {renamed[name]}", err=True)
        return parse_args(ctx, given)

    command.parse_args = parse_with_old_names  # type: ignore[method-assign]


def noun_app(name: str | None, help_text: str, **extra: Any) -> typer.Typer:
    """A command group (`layout`, `dataset`, ..., the root) with the help and typo handling all share."""
    return typer.Typer(
        name=name,
        help=help_text,
        no_args_is_help=True,
        rich_markup_mode=None,
        suggest_commands=True,  # `storekit layotu`: "No such command 'layotu'. Did you mean 'layout'?"
        context_settings=HELP_SETTINGS,
        **extra,
    )


def exit_codes(*codes: ExitCode) -> str:
    """The epilog listing the exit codes a command can end with (`\b` keeps Click from rewrapping it)."""
    listed = sorted({ExitCode.OK, *codes})
    return "\b\nExit codes:\n" + "\n".join(f"  {int(c):>3}  {EXIT_CODE_TABLE[c]}" for c in listed)


JsonOpt = Annotated[bool, typer_info(JSON)]
QuietOpt = Annotated[bool, typer_info(QUIET)]
ConfigOpt = Annotated[str | None, typer_info(CONFIG)]
TierOpt = Annotated[str | None, typer_info(TIER)]
EveryTierOpt = Annotated[
    str | None,
    typer.Option("--tier", "-t", metavar="NAME", help="Only this tier. Default: every tier in the config."),
]
DryRunOpt = Annotated[bool, typer_info(DRY_RUN)]


def make_output(json_mode: bool, quiet: bool) -> Output:
    return Output(json_mode=json_mode, quiet=quiet)


def site_config(config: str | None) -> SiteConfig:
    cfg = load_config(config)
    set_config_source(cfg.source)
    if cfg.source == EMBEDDED_SOURCE and not _interactive() and not quiet_run():
        # cron or a batch job started from the wrong directory would otherwise report on ./storage
        # unnoticed; said once the command succeeded (a failure says enough), never with --quiet
        # (errors only: a missing ./storage is a down tier, exit 5)
        searched = ", ".join(str(p) for p in config_search_path())
        root = cfg.tiers["local"].local_root
        set_closing_warning(
            f"no config file found (--config, ${ENV_CONFIG}, {searched}); "
            f"used the embedded default: one tier at {root}"
        )
    return cfg


def _interactive() -> bool:
    try:
        return sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def tier_store(config: SiteConfig, tier: str | None, *, probe: bool = True) -> Store:
    store = open_store(config.tier(tier))
    if probe:
        store.probe()
    return store
