"""The `storekit` command: nouns are registered here; errors become one line and an exit code.

A run builds only the noun it invokes (`storekit prepare ...` never imports bench, ckpt or tier):
importing every noun and building Typer's whole tree costs ~0.5 s a `prepare` run waits for.
Help, typos and completion get the whole tree (`app`, built on first use).
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

import typer
from typer._click.exceptions import NoSuchOption
from typer.core import TyperCommand, TyperGroup
from typer.main import get_command

from storekit import __version__
from storekit.cli.common import Command, exit_codes, noun_app, tidy_options
from storekit.cli.output import closing_warnings, dumps, error_document, reset_emitted, result_emitted
from storekit.cli.progress import interval_from_env
from storekit.config import redact_urls, refuse_url_credentials
from storekit.errors import ExitCode, Interrupted, StorekitError, storage_error
from storekit.interrupts import interrupt_on

# the first word of a command line -> the storekit.cli module that registers it (root help order)
NOUNS = {
    "init": "layout",
    "status": "layout",
    "layout": "layout",
    "prepare": "prepare",
    "dataset": "dataset",
    "ckpt": "ckpt",
    "tier": "tier",
    "bench": "bench",
    "jobs": "jobs",
    "config": "config",
    "version": "version",
}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"storekit {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """storekit: the storage tool for LLM training clusters."""


def build_app(modules: Sequence[str] = tuple(dict.fromkeys(NOUNS.values()))) -> typer.Typer:
    """The root command with the nouns of `modules` registered (all of them by default)."""
    root = noun_app(
        "storekit",
        (
            "Storage for self-hosted LLM training clusters: enforce the /storage layout on every tier, "
            "prepare tokenized datasets, and benchmark parallel I/O.\n\n"
            "Tiers come from storekit.toml (--config, $STOREKIT_CONFIG, ./storekit.toml); with no config, "
            "one local tier at ./storage is used. `storekit COMMAND --help` describes each command; "
            "`storekit --install-completion` sets up tab completion for your shell."
        ),
        epilog=exit_codes(*ExitCode),
        add_completion=True,
        pretty_exceptions_enable=False,
    )
    root.callback()(_root)
    for name in modules:
        importlib.import_module(f"storekit.cli.{name}").register(root)
    return root


def _modules_for(args: Sequence[str]) -> Sequence[str] | None:
    """The one module `args` invoke, or None (help, a typo, completion): the whole tree then."""
    if "_STOREKIT_COMPLETE" in os.environ:
        return None
    at = 0
    while at < len(args) and args[at].startswith("-"):  # common options before the noun
        common = _common_option(args[at])
        at += 2 if common is not None and common[1] else 1
    if at >= len(args) or args[at] not in NOUNS or {"-h", "--help"} & set(args[:at]):
        return None
    return (NOUNS[args[at]],)


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # the whole tree, for help tests and completion
        built = build_app()
        globals()["app"] = built
        return built
    raise AttributeError(name)


def _fail(exc: StorekitError, json_mode: bool) -> NoReturn:
    code = int(exc.exit_code)
    message = redact_urls(exc.message)
    hint = redact_urls(exc.hint) if exc.hint else None
    if json_mode and not result_emitted():
        sys.stdout.write(dumps(error_document(message, hint, code)) + "\n")
    sys.stderr.write(f"error: {message}\n")
    if hint:
        sys.stderr.write(f"hint: {hint}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def _message(exc: typer.TyperException) -> str:
    """The error's one line; an unknown option in the words storekit has always printed (Click's:
    `No such option '--jsn'. Did you mean '--json'?`), not those of Typer's copy of Click
    (`No such option: --jsn (Possible options: --json)`), which scripts matching the old would miss."""
    if not isinstance(exc, NoSuchOption):
        return exc.format_message()
    near = sorted(exc.possibilities or ())
    if not near:
        return f"No such option {exc.option_name!r}."
    shown = ", ".join(repr(p) for p in near)
    suggest = f"Did you mean {shown}?" if len(near) == 1 else f"(Did you mean one of: {shown}?)"
    return f"No such option {exc.option_name!r}. {suggest}"


def _usage_hint(exc: typer.TyperException) -> str | None:
    ctx = getattr(exc, "ctx", None)
    return f"{ctx.command_path} --help" if ctx is not None else None


def _crash(exc: BaseException, json_mode: bool) -> NoReturn:
    """A bug still gets its traceback, with the userinfo of any URL in it masked."""
    text = redact_urls("".join(traceback.format_exception(exc)))
    if json_mode and not result_emitted():
        message = redact_urls(f"internal error: {type(exc).__name__}: {exc}")
        sys.stdout.write(dumps(error_document(message, None, int(ExitCode.ERROR))) + "\n")
    sys.stderr.write(text)
    sys.stderr.flush()
    raise SystemExit(ExitCode.ERROR)


_URL_IN_ARG = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S*")


def _refuse_url_credentials(args: list[str]) -> None:
    """Any argument (`--input=s3://k:s@b/x` too) holding a URL with userinfo is refused before use."""
    for arg in args:
        for url in _URL_IN_ARG.findall(arg):
            refuse_url_credentials(url, "command line")


# options every command takes, accepted before the subcommand too (`storekit --config F tier --drain`,
# as git/kubectl/rclone users type): option -> takes a value
COMMON_OPTIONS = {"--config": True, "-c": True, "--json": False, "--quiet": False, "-q": False}
# switches main() takes itself, wherever they are typed before `--`: no command has its own
GLOBAL_SWITCHES = ("-v", "--verbose", "--no-color")


def _take_switches(args: list[str]) -> tuple[list[str], set[str]]:
    end = args.index("--") if "--" in args else len(args)
    taken = {a for a in args[:end] if a in GLOBAL_SWITCHES}
    return [a for a in args[:end] if a not in GLOBAL_SWITCHES] + args[end:], taken


def _common_option(arg: str) -> tuple[str, bool] | None:
    """(name, takes_value_in_next_arg) when `arg` is a common option (`--config=F` carries its value)."""
    name = arg.split("=", 1)[0] if arg.startswith("--") else arg
    if name not in COMMON_OPTIONS:
        return None
    return name, COMMON_OPTIONS[name] and "=" not in arg


def hoist_common_options(command: Command, args: Sequence[str]) -> list[str]:
    """`args` with common options typed before the command that takes them moved to just after it.

    Walks the command words (`layout`, `check`); a common option met on the way, which the group it
    follows does not take, moves behind the last word. What follows the last word is left as typed.
    """
    args = list(args)
    hoisted: list[str] = []
    at = 0
    cmd = command
    while at < len(args):
        arg = args[at]
        common = _common_option(arg)
        if common is not None and not _takes(cmd, common[0]):
            n = 2 if common[1] else 1
            hoisted += args[at : at + n]
            del args[at : at + n]
            continue
        if isinstance(cmd, TyperGroup) and arg in cmd.commands:
            sub = cmd.commands[arg]
            assert isinstance(sub, TyperGroup | TyperCommand)
            cmd = sub
            at += 1
            continue
        break
    return args[:at] + hoisted + args[at:]


def _takes(cmd: Command, option: str) -> bool:
    return any(option in p.opts for p in cmd.params)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    args, switches = _take_switches(list(args))
    verbose = bool({"-v", "--verbose"} & switches)
    if "--no-color" in switches:
        os.environ["NO_COLOR"] = "1"  # rich and every child process honour it
    if "--version" in args and not any(a in NOUNS for a in args[: args.index("--version")]):
        args = ["version"] + [a for a in args if a != "--version"]  # `--version --json` too
    json_mode = "--json" in args
    reset_emitted()
    interrupt_on(signal.SIGTERM, signal.SIGUSR1)  # SIGUSR1: Slurm's preemption warning
    modules = _modules_for(args)
    built = get_command(build_app() if modules is None else build_app(modules))
    assert isinstance(built, TyperGroup)
    command = tidy_options(built)
    args = hoist_common_options(command, args)
    try:
        _refuse_url_credentials(args)
        interval_from_env()  # a bad $STOREKIT_PROGRESS_INTERVAL is refused before anything runs
        rv = command.main(args=args, prog_name="storekit", standalone_mode=False)
    except StorekitError as exc:
        if verbose:  # where it was raised, for a bug report; the one-line error still ends the output
            sys.stderr.write(redact_urls("".join(traceback.format_exception(exc))))
        _fail(exc, json_mode)
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.TyperException as exc:
        # one line, as every other error (Click's own is a usage block, a blank line and the error)
        hint = _usage_hint(exc)
        sys.stderr.write(f"error: {_message(exc)}\n" + (f"hint: see {hint}\n" if hint else ""))
        code = exc.exit_code  # a usage error's is 2 (ExitCode.USAGE), as in the README table
        if json_mode and not result_emitted():
            # a `| jq` pipeline still gets its one document, saying what was wrong
            message = redact_urls(_message(exc))
            sys.stdout.write(dumps(error_document(message, _usage_hint(exc), code)) + "\n")
        raise SystemExit(code) from None
    except typer.Abort:
        sys.stderr.write("error: interrupted\n")
        raise SystemExit(ExitCode.INTERRUPTED) from None
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted; rerun the same command to resume\n")
        raise SystemExit(ExitCode.INTERRUPTED) from None
    except BrokenPipeError:
        raise SystemExit(ExitCode.OK) from None
    except OSError as exc:
        # what the OS refused on a named path (another user's directory, a file where a directory
        # belongs) is the user's situation, not a bug: one line naming the path
        known = storage_error(exc, str(exc.filename)) if exc.filename else None
        if known is None:
            _crash(exc, json_mode)
        _fail(known, json_mode)
    except Exception as exc:
        _crash(exc, json_mode)
    if rv == ExitCode.INTERRUPTED:
        # Typer turns a KeyboardInterrupt (Ctrl-C, or SIGTERM/SIGUSR1 above) that escapes a command
        # into a silent exit 130; say what happened, as for any other error
        _fail(Interrupted("interrupted", hint="rerun the same command to resume"), json_mode)
    code = rv if isinstance(rv, int) else 0
    if code == 0:
        for message in closing_warnings():
            sys.stderr.write(f"warning: {message}\n")
    raise SystemExit(code)
