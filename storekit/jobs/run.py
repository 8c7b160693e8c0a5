"""Running some tasks of an existing job (what a scheduler's element runs): read-only plan, no lock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storekit.errors import UsageError
from storekit.executors.base import default_workers, get_executor, load_job
from storekit.jobs.status import ranges


def run_tasks(
    path: Path, indexes: list[int], site: Any, *, workers: int | None = None, log: str | None = None
) -> dict[str, Any]:
    """Run the tasks of `indexes` not done yet on this host; the first failure is raised (and left
    as a failure record); a task that now succeeds loses its old failure record."""
    job = load_job(path, site)
    total = job.dir.header().tasks
    bad = [i for i in indexes if i >= total]
    if bad:
        raise UsageError(f"{path}: the plan has {total} tasks (0-{total - 1}); no task {bad[0]}")
    job.dir.remove_dead_temps()
    scan = job.dir.scan()
    todo = [i for i in dict.fromkeys(indexes) if i not in scan.done]

    def done(index: int, record: dict[str, Any]) -> None:
        if index in scan.failed:
            job.dir.clear_failure(index)

    executor = get_executor("local", log=log, own_temps_only=True)  # on this host, whatever the kind
    report = executor.run(job, todo, workers=workers or default_workers(), progress=_quiet, on_done=done)
    return {
        "work_dir": str(path),
        "tasks": ranges(sorted(set(indexes))),
        "run": report.tasks_run,
        "skipped": len(set(indexes)) - len(todo),
        "seconds": round(report.seconds, 3),
    }


def _quiet(docs: int, units: int, nbytes: int) -> None:
    pass
