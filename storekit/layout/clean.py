"""`storekit layout clean`: remove what the layout says has expired, never what is still in use.

An entry at the top of an area with a TTL (the default layout: `scratch/`, 14 days) expires when
nothing in it changed for longer than the TTL. A directory with a lease (a `prepare` work dir, a
bench scratch dir) is kept while a run holds the lease; once abandoned (no run holds it, idle for
the TTL) it is removed under its lease, so a run starting meanwhile wins. An entry named after a
Slurm job (`scratch/<jobid>`, `<jobid>_<task>`, `job-<jobid>`) is kept while that job is in
`squeue` (running, pending or held), and kept whenever Slurm exists but cannot be asked. Deletes
are tombstoned (rename to a hidden sibling, fsync the directory, then delete), so a crash never
leaves a half-deleted directory under its real name; tombstones a crash left behind go too,
and so, in the areas without a TTL (datasets/), do the tombstones of a dataset's temp siblings a
killed run left (the old copy of a replace), unless the dataset's lease says a run is on it.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from storekit.durable import TMP_MARK, is_tombstone, remove_tree
from storekit.errors import NoSpaceError, StorekitError, UnreachableError, UsageError, storage_errors
from storekit.jobs.reclaim import reclaim_work_dir, work_dir_state
from storekit.layout.spec import LayoutSpec
from storekit.lease import LEASE_NAME, LeaseInfo, binding_lease, dir_lease_path
from storekit.paths import join_rel
from storekit.store import Entry, Store
from storekit.units import format_duration

_JOB_NAME = re.compile(r"^(?:job[-_]?)?(\d+)(?:_(\d+))?(?:$|[-_.])")
JobQuery = Callable[[], set[str] | None]  # ids of jobs Slurm knows; None when there is no Slurm


@dataclass
class CleanEntry:
    path: str  # tier-relative
    action: str  # delete | keep | skip (could not be looked at or removed: the reason says why)
    reason: str
    bytes: int = 0
    age_s: float | None = None
    newest: float | None = None  # newest mtime inside, when planned: apply re-checks it
    leased: bool = False  # a directory with a lease (a work dir): removed under its lease
    ttl_s: float | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class CleanPlan:
    tier: str
    url: str
    layout: str
    entries: list[CleanEntry] = field(default_factory=list)
    slurm: str = "not found"  # not found | asked | unreachable: <why>

    @property
    def deletes(self) -> list[CleanEntry]:
        return [e for e in self.entries if e.action == "delete"]

    def to_dict(self) -> dict[str, object]:
        return {
            "tier": self.tier,
            "url": self.url,
            "layout": self.layout,
            "slurm": self.slurm,
            "delete_count": len(self.deletes),
            "delete_bytes": sum(e.bytes for e in self.deletes),
            "entries": [e.to_dict() for e in self.entries],
        }


class SlurmUnreachable(Exception):
    pass


def slurm_jobs(timeout: float = 30) -> set[str] | None:
    """Every job id `squeue` lists (job id, array job id and `array_task` form), or None without Slurm."""
    squeue = shutil.which("squeue")
    if squeue is None:
        return None
    try:
        proc = subprocess.run(
            [squeue, "-h", "-a", "-o", "%A %F %i"], capture_output=True, text=True, timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmUnreachable(str(exc)) from None
    if proc.returncode != 0:
        raise SlurmUnreachable(proc.stderr.strip() or f"squeue exited {proc.returncode}")
    return {token for line in proc.stdout.splitlines() for token in line.split()}


def job_ids_in_name(name: str) -> list[str]:
    m = _JOB_NAME.match(name)
    if not m:
        return []
    return [m[1]] + ([f"{m[1]}_{m[2]}"] if m[2] else [])


def _newest_and_bytes(
    store: Store, rel: str, top_mtime: float | None, is_dir: bool, size: int
) -> tuple[float, int]:
    newest, total = top_mtime or 0.0, 0 if is_dir else size
    if is_dir:
        for entry in store.walk(rel):
            if entry.mtime is not None:
                newest = max(newest, entry.mtime)
            if not entry.is_dir and not entry.is_link:
                total += entry.size
    return newest, total


def one_line(text: str) -> str:
    """A client's multi-line error as one line: its last line, the conclusion (squeue prints its
    DNS/config attempts first and `fatal: ...` last)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else text


def plan_clean(
    spec: LayoutSpec, store: Store, *, now: float | None = None, jobs: JobQuery = slurm_jobs
) -> CleanPlan:
    plan = CleanPlan(tier=store.name, url=store.display_url, layout=spec.name)
    if store.local_path("") is None:
        raise UsageError(
            f"tier {store.name}: layout clean works on POSIX tiers only (this is {store.display_url})"
        )
    now = time.time() if now is None else now
    try:
        known = jobs()
        plan.slurm = "not found" if known is None else "asked"
        unreachable: str | None = None
    except SlurmUnreachable as exc:
        known, unreachable = None, one_line(str(exc))
        plan.slurm = f"unreachable: {unreachable}"
    for area in spec.areas:
        if area.ttl_seconds is None or not store.exists(area.name):
            continue
        for entry in store.list(area.name):
            rel = join_rel(area.name, entry.name)
            try:
                with storage_errors(f"{store.display_url}/{rel}"):
                    planned = _plan_entry(store, entry, rel, area.ttl_seconds, now, known, unreachable)
                plan.entries.append(planned)
            except StorekitError as exc:  # one odd entry is reported and skipped, never stops the rest
                _raise_if_storage_failed(exc)
                plan.entries.append(CleanEntry(rel, "skip", f"skipped: {exc.message}"))
    for area in spec.areas:
        if area.ttl_seconds is None and not area.writers and store.exists(area.name):
            plan.entries += _interrupted_deletes(store, area.name, len(area.levels) - 1)
    return plan


def _interrupted_deletes(store: Store, rel: str, depth: int) -> list[CleanEntry]:
    """Outside the TTL areas (datasets/, models/): the tombstones of temp siblings a killed run left
    beside a dataset (`..v1.storekit-tmp-*.storekit-deleting-*`, e.g. the old copy of a replace
    killed while removing it after the commit). Whatever they held was being deleted; the next run
    into that path removes them too. One that a live run's lease covers is that run's to finish."""
    out: list[CleanEntry] = []
    try:
        with storage_errors(f"{store.display_url}/{rel}"):
            entries = store.list(rel)
    except StorekitError as exc:
        _raise_if_storage_failed(exc)
        return [CleanEntry(rel, "skip", f"skipped: {exc.message}")]
    for entry in entries:
        path = join_rel(rel, entry.name)
        if is_tombstone(entry.name) and TMP_MARK in entry.name:
            lease = _leftover_lease(Path(_local(store, path)))
            size = _newest_and_bytes(
                store, path, entry.mtime, entry.is_dir and not entry.is_link, entry.size
            )[1]
            if lease is not None:
                out.append(CleanEntry(path, "keep", f"in use: {lease.describe()} holds its lease", size))
            else:
                out.append(CleanEntry(path, "delete", "left by an interrupted delete", size))
        elif depth > 0 and entry.is_dir and not entry.is_link and not is_tombstone(entry.name):
            out += _interrupted_deletes(store, path, depth - 1)
    return out


def _leftover_lease(path: Path) -> LeaseInfo | None:
    """The live lease of the dataset a temp sibling's tombstone was left beside, if any:
    `..v1.storekit-tmp-*.storekit-deleting-*` -> `.v1.storekit-lease`."""
    if not (is_tombstone(path.name) and TMP_MARK in path.name):
        return None
    return binding_lease(path.parent / f".{path.name.lstrip('.').split(TMP_MARK)[0]}{LEASE_NAME}")


def _plan_entry(
    store: Store,
    entry: Entry,
    rel: str,
    ttl: float,
    now: float,
    known: set[str] | None,
    unreachable: str | None,
) -> CleanEntry:
    is_dir = entry.is_dir and not entry.is_link
    newest, size = _newest_and_bytes(store, rel, entry.mtime, is_dir, entry.size)
    if is_tombstone(entry.name):
        return CleanEntry(rel, "delete", "left by an interrupted delete", size)
    age = now - newest
    ids = job_ids_in_name(entry.name)
    local = _local(store, rel)  # never resolved: a link out of the tier is an entry like any other
    if is_dir and dir_lease_path(Path(local)).exists():
        return _leased_entry(rel, Path(local), size, ttl, now)
    if age <= ttl:
        reason = f"changed {format_duration(age)} ago; TTL is {format_duration(ttl)}"
        return CleanEntry(rel, "keep", reason, size, round(age, 1))
    if ids and unreachable is not None:
        reason = f"named after Slurm job {ids[0]} and Slurm cannot be asked ({unreachable})"
        return CleanEntry(rel, "keep", reason, size, round(age, 1))
    if ids and known is not None and any(i in known for i in ids):
        return CleanEntry(rel, "keep", f"Slurm job {ids[-1]} is still in the queue", size, round(age, 1))
    # an abandoned prepare work dir is one case of this (nothing written for a TTL)
    reason = f"unchanged for {format_duration(age)}; TTL is {format_duration(ttl)}"
    return CleanEntry(rel, "delete", reason, size, round(age, 1), newest)


def _local(store: Store, rel: str) -> str:
    """The entry's own path (its parents are the tier's areas): for lstat, rename, unlink only."""
    return os.path.join(store.local_path("") or "", rel)


def _leased_entry(rel: str, path: Path, size: int, ttl: float, now: float) -> CleanEntry:
    """A work dir (or bench scratch dir) with a lease: kept while a run holds it, else by idleness."""
    state = work_dir_state(path, now=now)
    age = round(state.idle_seconds, 1)
    if state.live:
        return CleanEntry(rel, "keep", f"in use: {state.holder} holds its lease", size, age)
    if state.idle_seconds < ttl:
        idle = format_duration(state.idle_seconds)
        reason = f"its last run changed it {idle} ago; TTL is {format_duration(ttl)}"
        return CleanEntry(rel, "keep", reason, size, age)
    reason = f"abandoned: no run holds it, unchanged for {format_duration(state.idle_seconds)}"
    return CleanEntry(rel, "delete", reason, size, age, leased=True, ttl_s=ttl)


def apply_clean(plan: CleanPlan, store: Store) -> list[CleanEntry]:
    """Delete what the plan says, except an entry written to since it was planned; returns the
    deleted. An entry that cannot be removed is marked "skip" with why, and the rest goes on."""
    deleted = []
    anchor = Path(store.local_path("") or "/")
    for entry in plan.deletes:
        try:
            with storage_errors(f"cannot delete {store.display_url}/{entry.path}"):
                removed = _apply_entry(entry, store, anchor)
            if removed:
                deleted.append(entry)
        except StorekitError as exc:
            _raise_if_storage_failed(exc)
            entry.action, entry.reason = "skip", f"skipped: {exc.message}"
    return deleted


def _raise_if_storage_failed(exc: StorekitError) -> None:
    """A full disk or an unreachable mount stops the clean-up (exit 6, 5); one entry that is not
    ours to touch (someone else's, a link out of the tier, permission denied) does not."""
    if isinstance(exc, NoSpaceError | UnreachableError):
        raise exc


def _apply_entry(entry: CleanEntry, store: Store, anchor: Path) -> bool:
    path = _local(store, entry.path)
    if not os.path.lexists(path):
        return False
    if entry.leased and entry.ttl_s is not None:
        # under its lease, idleness checked again, then tombstone-first (jobs.reclaim.reclaim)
        if reclaim_work_dir(Path(path), idle_for=entry.ttl_s, anchor=anchor):
            return True
        entry.action, entry.reason = "keep", "a run took its lease since it was planned"
        return False
    if entry.newest is not None:
        with storage_errors(f"{store.display_url}/{entry.path}"):
            st = os.lstat(path)
            is_dir = stat.S_ISDIR(st.st_mode)
            newest, _ = _newest_and_bytes(store, entry.path, st.st_mtime, is_dir, st.st_size)
        if newest > entry.newest:
            entry.action, entry.reason = "keep", "changed since it was planned"
            return False
    if _leftover_lease(Path(path)) is not None:
        entry.action, entry.reason = "keep", "a run took its lease since it was planned"
        return False
    with storage_errors(f"cannot delete {store.display_url}/{entry.path}"):
        remove_tree(path)
    return True
