"""The work dir of one dataset build: the plan, per-task parts and completion records, a lock.

    plan.json                 the plan (what every task reads; a Slurm array task too)
    tasks/000012/             a completed task: parts + done.json (appears by rename, whole)
    tasks/.000012.storekit-tmp-*   a task being written (removed on failure or at the next start)
    .storekit-lease           the lease of the run using it (storekit/lease.py): one run at a time,
                              and what tells a cleaner a work dir is abandoned (`abandoned()`)

It lives on a POSIX file system (local NVMe, Lustre, NFS): parts are memory-mapped at finalize.
It is private: created 0700, and refused when it is not a real directory owned by the running user,
or when group/others may write to it (its name is predictable, and scratch/ is world-writable).
Each completion record carries the size and xxh3-128 of the task's parts; finalize checks them.
Removal is tombstone-first (durable.remove_tree): renamed away in one step, then deleted.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storekit.durable import TMP_MARK, TOMBSTONE_MARK, fsync_dir, fsync_file, remove_tree, write_file_atomic
from storekit.errors import BusyError, MismatchError, NoSpaceError, StorekitError, storage_errors
from storekit.lease import Lease, dir_lease_path, read_lease
from storekit.ops import FileDigest, hash_local
from storekit.pipeline.plan import PrepPlan

DONE = "done.json"


class WorkDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.tasks = path / "tasks"

    @property
    def plan_file(self) -> Path:
        return self.path / "plan.json"

    def task_dir(self, index: int) -> Path:
        return self.tasks / f"{index:06d}"

    def is_done(self, index: int) -> bool:
        return (self.task_dir(index) / DONE).is_file()

    def done_tasks(self) -> set[int]:
        if not self.tasks.is_dir():
            return set()
        return {int(p.name) for p in self.tasks.iterdir() if p.name.isdigit() and (p / DONE).is_file()}

    def read_done(self, index: int) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads((self.task_dir(index) / DONE).read_bytes())
        return doc

    def check_parts(self, index: int, record: dict[str, Any]) -> None:
        """Every part of task `index` is what its completion record says (MismatchError, exit 4)."""
        folder = self.task_dir(index)
        parts = record.get("parts")
        if not isinstance(parts, dict):
            raise MismatchError(
                f"{folder / DONE}: the completion record lists no part digests",
                hint=f"remove {self.path} (not written by this storekit version) and rerun",
            )
        on_disk = {p.name for p in folder.iterdir() if p.name != DONE}
        for name in sorted(on_disk | set(parts)):
            expected = parts.get(name)
            try:
                got = part_digest(folder / name)
            except FileNotFoundError:
                got = None
            if expected is None or got is None or [got.size, got.xxh3_128] != expected:
                raise MismatchError(
                    f"{folder / name}: differs from the task's completion record "
                    f"({'not listed' if expected is None else 'missing' if got is None else 'other bytes'})",
                    hint=f"the work dir was changed behind storekit's back; remove {self.path} and rerun",
                )

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self, plan: PrepPlan, *, fresh: bool = False) -> bool:
        """Create or reuse the work dir for `plan` (`fresh`: drop finished tasks); True if some were kept."""
        with io_errors(self.path):
            make_private_dir(self.path)
            self.tasks.mkdir(exist_ok=True)
            resumed = False
            if self.plan_file.is_file():
                old = PrepPlan.from_json(self.plan_file.read_bytes())
                same_inputs = [(s.url, s.size, s.mtime) for s in old.sources] == [
                    (s.url, s.size, s.mtime) for s in plan.sources
                ]
                if old.plan_id == plan.plan_id and same_inputs and not fresh:
                    resumed = bool(self.done_tasks())
                else:
                    remove_path(self.tasks)
                    self.tasks.mkdir()
            self.remove_temps()
            write_file_atomic(self.plan_file, plan.to_json())
        return resumed

    def remove_temps(self) -> None:
        for parent in (self.path, self.tasks):
            if parent.is_dir():
                for p in parent.iterdir():
                    if TMP_MARK in p.name:
                        remove_path(p)

    def new_task_dir(self, index: int) -> Path:
        tmp = self.tasks / f".{index:06d}{TMP_MARK}{uuid.uuid4().hex[:12]}"
        with io_errors(tmp):
            tmp.mkdir(parents=True)
        return tmp

    def commit_task(self, tmp: Path, index: int) -> None:
        """The completion record: the task's directory appears under its final name, whole."""
        final = self.task_dir(index)
        with io_errors(final):
            for part in tmp.iterdir():
                fsync_file(part)
            try:
                os.rename(tmp, final)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                shutil.rmtree(tmp)  # someone else finished the same task: theirs is as good
            fsync_dir(self.tasks)

    @contextlib.contextmanager
    def leased(self) -> Iterator[Lease]:
        """One run per work dir at a time: the loser gets BusyError (exit 5) naming the holder."""
        with io_errors(self.path):
            make_private_dir(self.path)
            lease = Lease(dir_lease_path(self.path), purpose=f"using the work dir {self.path}")
            lease.acquire()
        try:
            yield lease
        finally:
            lease.release()

    def remove(self) -> None:
        """Tombstone first (durable.remove_tree): a stop during the delete leaves a tombstone that
        `clear_tombstones` (run at every start) removes, never a half-removed work dir."""
        remove_tree(self.path)

    def clear_tombstones(self) -> None:
        """Tombstones of this work dir only: another run may be deleting its own right now."""
        prefix = f".{self.path.name}{TOMBSTONE_MARK}"
        with contextlib.suppress(FileNotFoundError):
            for p in self.path.parent.iterdir():
                if p.name.startswith(prefix):
                    remove_path(p)


def part_digest(path: Path) -> FileDigest:
    return hash_local(path)


def make_private_dir(path: Path) -> None:
    """Create `path` 0700 if missing; refuse one that someone else could have planted or can change."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    check_private(path)


def check_private(path: Path) -> None:
    """Raise unless `path` is a real directory of the running user that only it may write to."""
    st = os.lstat(path)
    problem = None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        problem = "is not a directory (a symlink or a file)"
    elif st.st_uid != os.geteuid():
        problem = f"is owned by uid {st.st_uid}, not by the user running storekit (uid {os.geteuid()})"
    elif st.st_mode & 0o022:
        problem = f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    if problem:
        raise StorekitError(
            f"work dir {path} {problem}: refusing to use it (a work dir must be private)",
            hint="remove it if it is yours, or give this run its own --work-dir",
        )


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
    for p in (path / "plan.json", path / "tasks", *(() if own_lease else (dir_lease_path(path),))):
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


def reclaim(path: Path, *, idle_for: float, now: float | None = None) -> bool:
    """Remove an abandoned work dir (see `abandoned`), safely against a run starting meanwhile: its
    lease is taken first, idleness checked again under it, then the dir goes tombstone-first.
    False when it is not abandoned or a run holds it; only the owner's (or root's) call succeeds."""
    if not abandoned(path, idle_for=idle_for, now=now):
        return False
    work = WorkDir(path)
    try:
        with work.leased():
            if work_dir_state(path, now=now, own_lease=True).idle_seconds < idle_for:
                return False  # a run used it between the first look and the lease
            work.remove()
    except BusyError:
        return False
    return True


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def io_errors(path: Path) -> contextlib.AbstractContextManager[None]:
    """OS errors on the work dir become storekit errors naming the path (ENOSPC: exit 6)."""
    return storage_errors(str(path), hints={NoSpaceError: _NO_SPACE_HINT})


_NO_SPACE_HINT = "free space or point --work-dir at a larger file system; rerun to resume"
