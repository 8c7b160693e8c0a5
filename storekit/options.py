"""One declaration per command-line option: its flags, type, default, help and what it fills.

A command's options are a table of `Option`s. The CLI builds the command's parameters from the table
(storekit.cli.declared); the spec module takes its defaults from it and reads each value with the
option's typed reader (storekit.readers), the same reader a pipeline file's key goes through. An
option is written once, not as a Typer parameter, a defaults entry, a keyword and a spec field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# what --workers counts, in every command that has it; each help goes on to say where and what each does
WORKERS_HELP = "Workers running at once"


@dataclass(frozen=True, kw_only=True)
class Option:
    """One option (or positional argument) of a command."""

    name: str  # the command function's parameter: the key of the spec's keywords and defaults
    flags: tuple[str, ...] = ()  # "--file-size", "-b"; a switch pair "--direct/--no-direct"
    type: Any = str  # what the command line gives: str, int, float, bool or list[str]
    default: Any = None  # the value when it is given nowhere
    cli_default: Any = ...  # the command line's own default when it differs (None: not given)
    help: str = ""
    metavar: str | None = None
    panel: str | None = None  # the help section it is listed in (None: Options)
    argument: bool = False  # a positional argument rather than an option
    field: str | None = None  # the spec field it fills (None: the command uses it itself)
    key: str | None = None  # where a pipeline file gives it: "table.key"
    read: Callable[[Any], Any] | None = None  # its typed reader (storekit.readers); raises Invalid
    bounds: tuple[float, float] | None = None  # the range the spec's value (each item) must be in

    @property
    def flag(self) -> str:
        """The name errors give it: the long flag as declared (`--eos/--no-eos`), or the argument's."""
        return self.flags[0] if self.flags else self.metavar or self.name.upper()

    @property
    def cli_value(self) -> Any:
        """The command line's default: `cli_default` where declared, else `default`."""
        return self.default if self.cli_default is ... else self.cli_default


def defaults(table: Iterable[Option]) -> dict[str, Any]:
    """{name: default} of the options that fill the spec."""
    return {o.name: o.default for o in table if o.field}


def spec_values(table: Iterable[Option], given: Mapping[str, Any]) -> dict[str, Any]:
    """What the command line gave for the options that fill the spec, by name."""
    return {o.name: given[o.name] for o in table if o.field and o.name in given}


def overrides(table: Iterable[Option], given: Mapping[str, Any]) -> dict[str, Any]:
    """`spec_values`, with None for what was not given: a value left at the command line's default
    (None, no list, a switch left off) does not override a pipeline file's."""
    result: dict[str, Any] = {}
    for o in table:
        if o.field and o.name in given:
            value = given[o.name]
            unset = value is None or value == [] or (value is False and o.cli_value is False)
            result[o.name] = None if unset else value
    return result


# the options every command shares (storekit.cli.common makes their Typer annotations)
CONFIG = Option(
    name="config",
    flags=("--config", "-c"),
    metavar="FILE",
    help="Site config (storekit.toml). Default: $STOREKIT_CONFIG, then ./storekit.toml, "
    "$XDG_CONFIG_HOME/storekit/storekit.toml, /etc/storekit.toml, then the embedded default "
    "(one local tier at ./storage).",
)
JSON = Option(
    name="json_out",
    flags=("--json",),
    type=bool,
    default=False,
    help="Print exactly one JSON document (with schema_version) on stdout.",
)
QUIET = Option(
    name="quiet",
    flags=("--quiet", "-q"),
    type=bool,
    default=False,
    help="Errors only, on stderr (no progress, logs or warnings); stdout only for what was "
    "asked for (--json, a path, a listing). A failure always says why.",
)
TIER = Option(
    name="tier",
    flags=("--tier", "-t"),
    metavar="NAME",
    help="Tier to act on. Default: $STOREKIT_TIER, else the config's default_tier.",
)
DRY_RUN = Option(
    name="dry_run",
    flags=("--dry-run", "-n"),
    type=bool,
    default=False,
    help="Show the plan and change nothing, not even a state file.",
)
