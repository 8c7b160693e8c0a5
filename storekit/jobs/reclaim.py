"""Is a job work dir abandoned, and removing it safely when it is (what `layout clean` asks)."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from storekit.errors import BusyError
from storekit.jobdir import HEADER, PLAN, JobDir
from storekit.lease import dir_lease_path, read_lease


@dataclass(frozen=True)
class WorkDirState:
    path: Path
    owner_uid: int
    live: bool  # a binding lease: a run is using it now
    holder: str | None  # who holds (or last held) the lease
    idle_seconds: float  # since the newest change of its plan, tasks or lease


def work_dir_state(path: Path, *, now: float | None = None, own_lease: bool = False) -> WorkDirState:
    """What a cleaner needs to decide about a work dir (see `abandoned`); `own_lease`: the caller
    holds the lease now, so the lease file and the dir's own mtime say nothing about the last run."""
    now = time.time() if now is None else now
    lease = read_lease(dir_lease_path(path))
    newest = 0.0 if own_lease else os.lstat(path).st_mtime
    looked = (path / PLAN, path / HEADER, path / "tasks", path / "failed")
    for p in (*looked, *(() if own_lease else (dir_lease_path(path),))):
        with contextlib.suppress(FileNotFoundError):
            newest = max(newest, p.stat().st_mtime)
    return WorkDirState(
        path=path,
        owner_uid=os.lstat(path).st_uid,
        live=lease is not None and not own_lease and lease.binds(now),
        holder=lease.describe() if lease is not None else None,
        idle_seconds=max(0.0, now - newest),
    )


def abandoned(path: Path, *, idle_for: float, now: float | None = None) -> bool:
    """True when no run holds the work dir and nothing in it changed for `idle_for` seconds: a run
    that was killed and never rerun, whose input changed (a new plan, a new work dir), or that
    stopped with --on-error fail. Only its owner (or root) may remove it."""
    state = work_dir_state(path, now=now)
    return not state.live and state.idle_seconds >= idle_for


def reclaim_work_dir(
    path: Path, *, idle_for: float, now: float | None = None, anchor: Path | None = None
) -> bool:
    """Remove an abandoned work dir (see `abandoned`), safely against a run starting meanwhile: its
    lease is taken first, idleness checked again under it, then the dir goes tombstone-first.
    False when it is not abandoned or a run holds it; only the owner's (or root's) call succeeds.
    `anchor`: the tier root its parents are trusted up to (storekit.trusted_dirs)."""
    if not abandoned(path, idle_for=idle_for, now=now):
        return False
    # root reclaims any user's abandoned work dir: it is checked as that user's private dir
    owner = os.lstat(path).st_uid if os.geteuid() == 0 else None
    work = JobDir(path, anchor=anchor, owner=owner)
    try:
        with work.leased():
            if work_dir_state(path, now=now, own_lease=True).idle_seconds < idle_for:
                return False  # a run used it between the first look and the lease
            work.remove()
    except BusyError:
        return False
    return True
