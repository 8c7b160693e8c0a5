"""Prometheus text exposition for node_exporter's textfile collector: every command renders its metrics here.

A family has one name, one HELP and one TYPE, declared once before its samples; quantiles only appear
on summaries (with their `_sum` and `_count`); label values and HELP text are escaped as the format
requires. `write_textfile` replaces the file atomically with mode 0644, since the collector reads it
as another user and must never see half a file.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from storekit.durable import write_file_atomic
from storekit.errors import UsageError, storage_errors

TEXTFILE_MODE = 0o644
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
LabelValues = Mapping[str, object]


def escape_label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return format(float(value), ".10g")


def _labels(labels: LabelValues, quantile: float | None = None) -> str:
    # `quantile` is reserved for summaries; it is only ever added here, never taken from callers
    for name in labels:
        if not _LABEL_NAME.fullmatch(name) or name.startswith("__") or name == "quantile":
            raise ValueError(f"invalid Prometheus label name {name!r}")
    pairs = [f'{k}="{escape_label(v)}"' for k, v in labels.items()]
    if quantile is not None:
        pairs.append(f'quantile="{format_value(quantile)}"')
    return "{" + ",".join(pairs) + "}" if pairs else ""


@dataclass
class _Family:
    name: str
    help: str
    kind: str
    lines: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    def add(self, suffix: str, labels: str, value: float) -> None:
        key = f"{self.name}{suffix}{labels}"
        if key in self.seen:
            raise ValueError(f"duplicate Prometheus sample {key}")
        self.seen.add(key)
        self.lines.append(f"{key} {format_value(value)}")


class Metrics:
    """Collects families in the order they are first used and renders them as one text document."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}

    def _family(self, name: str, help_text: str, kind: str) -> _Family:
        if not _METRIC_NAME.fullmatch(name):
            raise ValueError(f"invalid Prometheus metric name {name!r}")
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = _Family(name, help_text, kind)
        elif family.kind != kind or family.help != help_text:
            raise ValueError(f"{name} declared twice with a different TYPE or HELP")
        return family

    def gauge(self, name: str, help_text: str, labels: LabelValues, value: float | None) -> None:
        """One gauge sample; a None value (not measured) writes nothing."""
        if value is None:
            return
        self._family(name, help_text, "gauge").add("", _labels(labels), value)

    def summary(
        self,
        name: str,
        help_text: str,
        labels: LabelValues,
        *,
        quantiles: Mapping[float, float | None],
        count: int,
        total: float,
    ) -> None:
        """One summary: the quantiles known, then `_sum` and `_count` (which a summary must have)."""
        family = self._family(name, help_text, "summary")
        base = _labels(labels)
        for q, value in sorted(quantiles.items()):
            if value is None:
                continue
            family.add("", _labels(labels, quantile=q), value)
        family.add("_sum", base, total)
        family.add("_count", base, count)

    def render(self) -> str:
        lines: list[str] = []
        for family in self._families.values():
            if not family.lines:
                continue
            lines += [
                f"# HELP {family.name} {_escape_help(family.help)}",
                f"# TYPE {family.name} {family.kind}",
            ]
            lines += family.lines
        return "\n".join(lines) + "\n"


def write_textfile(path: str, text: str) -> None:
    """Atomic (temp + fsync + rename in the destination's directory) with mode 0644 whatever the umask."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"{path}: directory {directory} does not exist")
    with storage_errors(f"cannot write {path}"):
        write_file_atomic(path, text.encode("utf-8"), mode=TEXTFILE_MODE)
