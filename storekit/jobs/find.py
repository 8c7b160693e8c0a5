"""Finding job work dirs: by path, or by the output (a dataset) a job writes.

Work dir names and what an output TARGET means come from the registered job kinds
(storekit/executors/kinds.py), not from here.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from storekit.config import SiteConfig
from storekit.errors import NotFoundError, StorekitError
from storekit.executors.kinds import dir_prefixes, job_kinds, resolve
from storekit.jobdir import HEADER, JobDir
from storekit.paths import join_rel
from storekit.trusted_dirs import state_dir


def is_job_dir(path: Path) -> bool:
    return (path / HEADER).is_file()


def job_dirs_under(root: Path) -> list[Path]:
    """Job work dirs directly below `root` (one listing; a header read only for likely names)."""
    try:
        names = sorted(os.listdir(root))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    prefixes = dir_prefixes()  # how each registered job kind names its work dirs
    return [root / n for n in names if n.startswith(prefixes) and is_job_dir(root / n)]


def search_roots(site: SiteConfig, work_dir: str | None, output_local: str | None) -> list[Path]:
    """Where work dirs are made (pipeline.prepare.work_dir_for): --work-dir, each POSIX tier's
    scratch/, beside the output; and jobs/ of the user's state dir (bench io's runs)."""
    from storekit.store import open_store

    roots: list[Path] = []
    if work_dir:
        roots.append(Path(work_dir).expanduser().resolve())
    for tier in site.tiers.values():
        if tier.scheme != "file":
            continue
        with contextlib.suppress(StorekitError, OSError):
            local = open_store(tier).local_path(join_rel("scratch", ""))
            if local:
                roots.append(Path(local))
    if output_local:
        roots.append(Path(output_local).parent)
    if (state := state_dir()) is not None:
        roots.append(state / "jobs")
    return list(dict.fromkeys(roots))


def find_job_dirs(target: str | None, site: SiteConfig, tier: str | None, work_dir: str | None) -> list[Path]:
    """TARGET: a job work dir, a dir holding work dirs, a dataset (the jobs writing it), or nothing
    (every job in the roots). NotFoundError (exit 3) when a target matches no job."""
    if target is not None:
        path = Path(target).expanduser()
        if path.is_dir() and is_job_dir(path):
            return [path.resolve()]
        if path.is_dir() and (found := job_dirs_under(path)):
            return found
    output, output_local = None, None
    if target is not None:
        output, output_local = _locate(target, site, tier)
    found = []
    for root in search_roots(site, work_dir, output_local):
        for path in job_dirs_under(root):
            if output is None or _writes(path, output):
                found.append(path)
    if target is not None and not found:
        raise NotFoundError(
            f"no job work dir for {target} (looked in --work-dir, each POSIX tier's scratch/ and "
            "beside the output)",
            hint="give the work dir itself, or --work-dir as given to the command that made it",
        )
    return found


def _locate(target: str, site: SiteConfig, tier: str | None) -> tuple[str | None, str | None]:
    """The output TARGET names (as jobs record it) and its local path, by the first job kind that
    resolves outputs (prepare: a dataset; its `locate` hook raises for a TARGET it cannot be)."""
    for kind in job_kinds():
        if kind.locate is not None:
            located: tuple[str | None, str | None] = resolve(kind.locate)(target, site, tier)
            return located
    return None, None


def _writes(path: Path, output: str) -> bool:
    try:
        return JobDir(path).header().meta.get("output") == output
    except StorekitError:
        return False
