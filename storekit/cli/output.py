"""The one output object every command talks to.

Results go to stdout: a human rendering, or with `--json` exactly one JSON document carrying
`schema_version`. Progress bars, logs and errors go to stderr, so `--json` output can be piped.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

JSON_SCHEMA_VERSION = 1
_emitted = {"result": False}  # stdout carries exactly one JSON document: a result or an error


def result_emitted() -> bool:
    return _emitted["result"]


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    return str(obj)


def dumps(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, default=_json_default, ensure_ascii=False, indent=2)


class RatesColumn(ProgressColumn):
    """Extra per-second rates (docs/s, tokens/s, ...) from numeric task fields."""

    def __init__(self, fields: Mapping[str, str]) -> None:
        super().__init__()
        self.fields = fields  # task field -> label

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        if elapsed <= 0:
            return Text("")
        parts = []
        for key, label in self.fields.items():
            value = float(task.fields.get(key, 0) or 0)
            parts.append(f"{_si(value / elapsed)} {label}/s")
        return Text("  ".join(parts), style="progress.data.speed")


def _si(value: float) -> str:
    for unit in ("", "k", "M", "G", "T"):
        if abs(value) < 1000:
            return f"{value:.1f}{unit}"
        value /= 1000
    return f"{value:.1f}P"


class ProgressHandle:
    def __init__(self, progress: Progress | None, task_id: Any) -> None:
        self._progress = progress
        self._task = task_id
        self.fields: dict[str, float] = {}

    def advance(self, amount: float = 1, **fields: float) -> None:
        for key, value in fields.items():
            self.fields[key] = self.fields.get(key, 0) + value
        if self._progress is not None:
            fields_any: dict[str, Any] = dict(self.fields)
            self._progress.update(self._task, advance=amount, **fields_any)

    def set_total(self, total: float | None) -> None:
        if self._progress is not None:
            self._progress.update(self._task, total=total)


class Output:
    def __init__(self, *, json_mode: bool = False, quiet: bool = False) -> None:
        self.json_mode = json_mode
        self.quiet = quiet
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self.out = Console(highlight=False, soft_wrap=True)
        self._started = time.monotonic()

    def result(self, command: str, data: Mapping[str, Any], human: Callable[[Console], None]) -> None:
        _emitted["result"] = True
        if self.json_mode:
            doc = {"schema_version": JSON_SCHEMA_VERSION, "command": command, **data}
            sys.stdout.write(dumps(doc) + "\n")
            sys.stdout.flush()
        else:
            human(self.out)

    def info(self, message: str) -> None:
        if not self.quiet:
            self.err.print(message, markup=False)

    def warn(self, message: str) -> None:
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
        """A progress bar on stderr with rate and ETA; silent with --quiet."""
        if self.quiet:
            yield ProgressHandle(None, None)
            return
        columns: list[ProgressColumn | str] = [
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
        ]
        if transfer:
            from rich.progress import DownloadColumn, TransferSpeedColumn

            columns += [DownloadColumn(), TransferSpeedColumn()]
        else:
            columns += [MofNCompleteColumn(), TextColumn(unit)]
        if rates:
            columns.append(RatesColumn(rates))
        columns += [TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn()]
        with Progress(*columns, console=self.err, transient=False) as progress:
            task_id = progress.add_task(description, total=total)
            yield ProgressHandle(progress, task_id)


def error_document(message: str, hint: str | None, exit_code: int) -> dict[str, Any]:
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "error": {"message": message, "hint": hint, "exit_code": exit_code},
    }
