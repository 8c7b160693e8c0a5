"""The work dir of one dataset build: the plan, per-task parts and completion records, a lock.

    plan.json                 the plan (what every task reads; a Slurm array task too)
    tasks/000012/             a completed task: parts + done.json (appears by rename, whole)
    tasks/.000012.storekit-tmp-*   a task being written (removed on failure or at the next start)
    lock                      flock: one run per work dir at a time

It lives on a POSIX file system (local NVMe, Lustre, NFS): parts are memory-mapped at finalize.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from storekit.durable import TMP_MARK, fsync_dir, fsync_file, write_file_atomic
from storekit.errors import NoSpaceError, UsageError, storage_errors
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

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self, plan: PrepPlan, *, fresh: bool = False) -> bool:
        """Create or reuse the work dir for `plan` (`fresh`: drop finished tasks); True if some were kept."""
        with io_errors(self.path):
            self.path.mkdir(parents=True, exist_ok=True)
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
                    shutil.rmtree(self.tasks)
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
    def locked(self) -> Iterator[None]:
        with io_errors(self.path):
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError(
                    f"another storekit prepare is running with work dir {self.path}",
                    hint="wait for it to finish, or give this run its own --work-dir",
                ) from None
            yield
        finally:
            os.close(fd)

    def remove(self) -> None:
        remove_path(self.path)


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
