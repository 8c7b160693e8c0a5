"""Job kinds: what a domain package registers for each kind of job it runs through the job layer.

The executors and the job commands (`jobs status/run-task/run-element/finalize/rerun`) know a job
only by the kind its job.json names; everything kind-specific is looked up here: how to load the job
from its work dir, what an element on a scheduler's node runs instead (`on_node`), what to redo
before its failed tasks are resubmitted (`before_resubmit`), how its work dirs are named (so
`jobs status` can find them) and what `jobs status` shows as its result (`result`). Targets are
"module:attribute" strings, imported only when used: an array element imports the code of its own
kind only.

A process learns the kinds by importing the modules that register them: storekit's own
(`BUILTIN_PLUGINS`) and any named in $STOREKIT_JOB_KINDS (comma-separated modules; sbatch passes
the submitting environment on, so an element knows the kinds its submitter knew). They are
imported the first time a kind is looked up that is not registered yet.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storekit.errors import UsageError

PLUGINS_ENV = "STOREKIT_JOB_KINDS"
# the domain packages' registration modules: each registers its kinds when imported
BUILTIN_PLUGINS = ("storekit.pipeline.kinds", "storekit.tier.kinds", "storekit.bench.kinds")


@dataclass(frozen=True)
class JobKind:
    name: str
    load: str  # (path, site) -> Job: the job of an existing work dir
    on_node: str | None = None  # (Job) -> Job: the job as a scheduler's array element runs it
    before_resubmit: str | None = None  # (JobDir, done tasks) -> notes: before failed tasks go again
    dir_prefixes: tuple[str, ...] = ()  # how its work dirs are named (what `jobs status` looks for)
    # (target, site, tier) -> (output as job.json's meta names it, its local path or None): what
    # `jobs status TARGET` means by an output TARGET (prepare: a dataset)
    locate: str | None = None
    # (JobDir) -> dict or None: what `jobs status` shows of a finished job's result (bench io: the
    # document and a summary of its rates)
    result: str | None = None


_KINDS: dict[str, JobKind] = {}
_loaded: list[str] = []  # plugin modules imported so far


def register(kind: JobKind) -> None:
    _KINDS[kind.name] = kind


def job_kind(name: str) -> JobKind:
    """The registered kind `name` (UsageError, exit 2, naming the known ones when none is)."""
    if name not in _KINDS:
        load_plugins()
    kind = _KINDS.get(name)
    if kind is None:
        raise UsageError(f"unknown job kind {name!r} (known: {', '.join(sorted(_KINDS))})")
    return kind


def job_kinds() -> list[JobKind]:
    load_plugins()
    return [_KINDS[name] for name in sorted(_KINDS)]


def dir_prefixes() -> tuple[str, ...]:
    """Every registered kind's work dir name prefixes."""
    return tuple(p for kind in job_kinds() for p in kind.dir_prefixes)


def hook(name: str, which: str) -> Callable[..., Any] | None:
    """Kind `name`'s `which` hook ("on_node", "before_resubmit", "result") imported, or None if it
    has none."""
    target = getattr(job_kind(name), which)
    return None if target is None else resolve(target)


def resolve(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def load_plugins() -> None:
    extra = [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]
    for module in (*BUILTIN_PLUGINS, *extra):
        if module not in _loaded:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise UsageError(f"${PLUGINS_ENV}: cannot import job kind module {module!r}: {exc}") from None
            _loaded.append(module)
