"""Before `jobs rerun` resubmits a prepare job's failed tasks: inputs fixed since the plan.

A changed jsonl or text source that no finished task read gets its new size and mtime in the plan
(the elements check them at task start: staging.py); any other change needs a new plan (rerun
`prepare dataset`). Registered as prepare's `before_resubmit` hook (kinds.py).
"""

from __future__ import annotations

from dataclasses import replace

from storekit.errors import InputError
from storekit.jobdir import JobDir
from storekit.pipeline.formats import format_named
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.staging import changed_since_planned
from storekit.pipeline.workdir import WorkDir, read_plan


def refresh_sources(work: JobDir, done: set[int]) -> list[str]:
    """Record fixed inputs' new size and mtime in the plan, where that is sound (see above); the
    inputs so recorded."""
    prep = WorkDir(work.path)
    plan = read_plan(prep)
    readers: dict[int, set[int]] = {}
    for task in plan.tasks:
        for piece in task.pieces:
            readers.setdefault(piece.source, set()).add(task.index)
    sources = list(plan.sources)
    changed = []
    fs = InputFS(None)  # local sources only: an S3 one would need the site's credentials
    for i, src in enumerate(sources):
        if not src.url.startswith("/"):
            continue
        now = changed_since_planned(src, fs)
        if now is None:
            continue
        restated = format_named(src.format).restated(src, *now)
        if readers.get(i, set()) & done or restated is None:
            raise InputError(
                f"input {src.display} changed since it was planned, and the plan cannot follow "
                "(finished tasks read it, or its format is split by rows)",
                hint="rerun `storekit prepare dataset` with the same options: it plans again",
            )
        sources[i] = restated
        changed.append(src.display)
    if changed:
        header = prep.header()
        new = replace(plan, sources=tuple(sources))
        prep.write_plan(new.to_json(), kind=header.kind, tasks=header.tasks, meta=header.meta)
    return changed
