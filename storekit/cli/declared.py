"""Typer commands built from option tables (storekit.options).

A command with many options is written as its table and a function taking what was given
(`run(given)`, one attribute per option); `declared_command` makes the function Typer registers,
its `__signature__` one `Annotated[type, typer.Option(...)]` parameter per declaration, which
Typer reads as it reads a written-out signature.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Annotated, Any

import typer

from storekit.options import Option


def typer_info(opt: Option) -> Any:
    """The typer.Option (or typer.Argument) of one declaration."""
    if opt.argument:
        return typer.Argument(metavar=opt.metavar, help=opt.help)
    return typer.Option(*opt.flags, help=opt.help, metavar=opt.metavar, rich_help_panel=opt.panel)


def annotation(opt: Option) -> Any:
    """`Annotated[type, typer.Option(...)]`, the type optional where the command line's default is None."""
    kind = opt.type if opt.cli_value is not None else opt.type | None
    return Annotated[kind, typer_info(opt)]


def signature(table: Sequence[Option]) -> inspect.Signature:
    """One keyword parameter per declaration; a name or a flag declared twice is a bug, refused."""
    names = [o.name for o in table]
    flags = [f for o in table for flag in o.flags for f in flag.split("/")]
    twice = {n for n in names if names.count(n) > 1} | {f for f in flags if flags.count(f) > 1}
    if twice:
        raise ValueError(f"declared twice: {', '.join(sorted(twice))}")
    return inspect.Signature(
        [
            inspect.Parameter(
                o.name, inspect.Parameter.KEYWORD_ONLY, default=o.cli_value, annotation=annotation(o)
            )
            for o in table
        ]
    )


def declared_command(table: Sequence[Option], run: Callable[[SimpleNamespace], None]) -> Callable[..., None]:
    """The function Typer registers for `run`: its parameters are `table`, in that order."""

    def command(**given: Any) -> None:
        run(SimpleNamespace(**given))

    command.__signature__ = signature(table)  # type: ignore[attr-defined]
    command.__name__ = command.__qualname__ = run.__name__
    command.__module__ = run.__module__
    return command
