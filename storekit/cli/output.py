"""The one output object every command talks to.

Results go to stdout: a human rendering, or with `--json` exactly one JSON document carrying
`schema_version`. Progress bars, logs and errors go to stderr, so `--json` output can be piped.
"""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import IO, TYPE_CHECKING, Any, NoReturn, cast

import typer

from storekit.cli.progress import PlainProgress, ProgressState, fit, interval_from_env, progress_parts

if TYPE_CHECKING:  # rich loads on first human output: --json and --quiet runs never need it (~20 ms)
    from rich.console import Console
    from rich.text import Text

JSON_SCHEMA_VERSION = 1
# commands whose stdout is what was asked for (a path for `$(...)`, a listing): printed with --quiet too;
# every other command's report is left out with --quiet (cron mails whatever reaches stdout)
ANSWERS = frozenset(
    {
        "ckpt latest",
        "ckpt list",
        "dataset list",
        "dataset info",
        "dataset inspect",
        "dataset blend",
        "layout show",
        "config show",
        "jobs status",
        "version",
    }
)
_emitted = {"result": False}  # stdout carries exactly one JSON document: a result or an error
_config: dict[str, str | None] = {"source": None}  # the site config this run loaded, for every result
_quiet = {"run": False}  # --quiet was given: stderr carries errors only
_closing: list[str] = []  # warnings said at the end of a run that succeeded


def result_emitted() -> bool:
    return _emitted["result"]


def reset_emitted() -> None:
    """Start of a command: nothing on stdout yet (matters when main() runs twice in one process)."""
    _emitted["result"] = False
    _config["source"] = None
    _quiet["run"] = False
    _closing.clear()


def set_closing_warning(message: str) -> None:
    _closing.append(message)


def closing_warnings() -> list[str]:
    return list(_closing)


def set_config_source(source: str) -> None:
    """The config file this run uses (or the embedded default): every --json result names it."""
    _config["source"] = source


def config_source() -> str | None:
    return _config["source"]


def quiet_run() -> bool:
    return _quiet["run"]


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    return str(obj)


_UNBOUNDED = 10_000  # columns when stdout is not a terminal: wider than any name storekit prints


class _PlainLines(io.TextIOBase):
    """sys.stdout (looked up on each write) with the spaces at the end of every line removed."""

    def __init__(self) -> None:
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        if lines:
            sys.stdout.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            sys.stdout.write(self._pending.rstrip(" "))
            self._pending = ""
        sys.stdout.flush()

    def isatty(self) -> bool:
        return False


def dumps(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, default=_json_default, ensure_ascii=False, indent=2)


class _LiveLine:
    """The terminal bar: one line, redrawn in place, cut to the terminal's width instead of wrapping."""

    def __init__(self, state: ProgressState, console: Console) -> None:
        self.state = state
        self.console = console

    def __rich__(self) -> Text:
        from rich.text import Text

        line = fit(progress_parts(self.state, time.monotonic(), bar=True), max(self.console.width - 1, 20))
        return Text(line, no_wrap=True, overflow="crop")


class ProgressHandle:
    def __init__(self, state: ProgressState | None, plain: PlainProgress | None = None) -> None:
        self._state = state
        self._plain = plain
        self.fields: dict[str, float] = {}

    def advance(self, amount: float = 1, **fields: float) -> None:
        for key, value in fields.items():
            self.fields[key] = self.fields.get(key, 0) + value
        if self._plain is not None:
            self._plain.advance(amount, fields)
        elif self._state is not None:
            self._state.advance(amount, fields)

    def set_total(self, total: float | None) -> None:
        if self._plain is not None:
            self._plain.set_total(total)
        elif self._state is not None:
            self._state.total = total


class Output:
    def __init__(self, *, json_mode: bool = False, quiet: bool = False) -> None:
        self.json_mode = json_mode
        self.quiet = quiet
        _quiet["run"] = _quiet["run"] or quiet
        self._started = time.monotonic()

    @cached_property
    def err(self) -> Console:
        from rich.console import Console

        return Console(stderr=True, highlight=False, soft_wrap=True)

    @cached_property
    def out(self) -> Console:
        from rich.console import Console

        if sys.stdout.isatty():
            return Console(highlight=False, soft_wrap=True)
        # a pipe, a file, cron mail: nothing cut or folded at 80 columns, no padding at line ends, so
        # `| grep`, `| cut` and `| tee` see whole names
        return Console(
            file=cast("IO[str]", _PlainLines()),
            width=_UNBOUNDED,
            highlight=False,
            soft_wrap=True,
            color_system=None,
        )

    def result(
        self,
        command: str,
        data: Mapping[str, Any],
        human: Callable[[Console], None],
        *,
        answer: bool | None = None,
    ) -> None:
        """The command's result on stdout. `answer`: the human rendering is what was asked for, so
        --quiet prints it too (default: whether `command` is one of ANSWERS)."""
        _emitted["result"] = True
        if self.json_mode:
            doc = {"schema_version": JSON_SCHEMA_VERSION, "command": command, **data}
            if _config["source"] is not None:
                doc.setdefault("config", _config["source"])
            sys.stdout.write(dumps(doc) + "\n")
            sys.stdout.flush()
        elif not self.quiet or (command in ANSWERS if answer is None else answer):
            human(self.out)

    def failed(self, code: int, message: str, hint: str | None = None) -> NoReturn:
        """End a command whose report is out with failure exit `code` (a mismatch found, a move that
        failed). --quiet left that report out, so the failure is said as an error line on stderr:
        cron mails it, a Slurm epilog's log keeps it; nothing fails silently."""
        if self.quiet:
            sys.stderr.write(f"error: {message}\n" + (f"hint: {hint}\n" if hint else ""))
            sys.stderr.flush()
        raise typer.Exit(code)

    def info(self, message: str) -> None:
        if not self.quiet:
            self.err.print(message, markup=False)

    def warn(self, message: str) -> None:
        """A warning on stderr; --quiet leaves only errors there."""
        if not self.quiet:
            self.err.print(f"warning: {message}", style="yellow", markup=False)

    @contextmanager
    def progress(
        self,
        description: str,
        *,
        total: float | None = None,
        unit: str = "items",
        rates: Mapping[str, str] | None = None,
        transfer: bool = False,
    ) -> Iterator[ProgressHandle]:
        """Progress on stderr: a one-line bar in a terminal, plain periodic lines in logs and pipes;
        silent with --quiet."""
        if self.quiet:
            yield ProgressHandle(None)
            return
        state = ProgressState(
            description, total, time.monotonic(), unit=unit, transfer=transfer, rates=dict(rates or {})
        )
        if not self.err.is_terminal:
            plain = PlainProgress(state, sys.stderr, interval=interval_from_env())
            try:
                yield ProgressHandle(state, plain)
            finally:
                plain.close()
            return
        from rich.live import Live

        with Live(_LiveLine(state, self.err), console=self.err, refresh_per_second=4, transient=False):
            yield ProgressHandle(state)


def error_document(message: str, hint: str | None, exit_code: int) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema_version": JSON_SCHEMA_VERSION,
        "error": {"message": message, "hint": hint, "exit_code": exit_code},
    }
    if _config["source"] is not None:  # a failure from the wrong cwd says which config it used too
        doc["config"] = _config["source"]
    return doc
