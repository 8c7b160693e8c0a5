"""The work dir of one job: a plan, per-task records, submitted job ids, a lease.

    plan.json                  the plan (bytes of the job's kind; what every task reads)
    job.json                   kind, tasks, the plan's xxh3-128: written after plan.json, so a
                               job.json names a whole plan (readers check the digest)
    tasks/000012/              a finished task: its parts + done.json (the completion record);
                               appears by one rename, whole
    tasks/.000012.storekit-tmp-PID-START@HOST.RAND   a task being written by the run PID
                               (started at START, clock ticks since boot) on HOST
    failed/000012.json         why task 12 failed last (error, exit code, host, pid, log, time)
    jobs.json                  job ids of the submissions (executor, id, array, batches)
    .storekit-lease            the lease of the submitting run (storekit/lease.py)

Only the submitting process writes plan.json, job.json and jobs.json. Tasks (threads, processes,
Slurm array elements on other nodes) only read the plan, write their own temp dir and records, and
take no lock: a completion record is a directory rename, atomic on POSIX, Lustre and NFS. Which tasks
are done, failed or in flight is one listing of tasks/ and one of failed/, never a stat per task.

The dir is private: created 0700, refused when it is not a real directory owned by the running user
or when group/others may write to it (its name is predictable, scratch/ is world-writable).
Removal is tombstone-first (durable.remove_tree).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import stat
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import xxhash

from storekit import __version__, faults
from storekit.digest import FileDigest, hash_local, hash_stream
from storekit.durable import (
    TMP_MARK,
    TOMBSTONE_MARK,
    fsync_dir,
    fsync_file,
    remove_tombstone,
    remove_tree,
    write_file_atomic,
)
from storekit.errors import MismatchError, NoSpaceError, NotFoundError, StorekitError, storage_errors
from storekit.lease import Lease, dir_lease_path
from storekit.liveness import process_alive, process_start
from storekit.records import RecordFile
from storekit.trusted_dirs import DirPin, HeldDir, check_ancestors

DONE = "done.json"
PLAN = "plan.json"
HEADER = "job.json"
SUBMISSIONS = "jobs.json"
JOB_FORMAT = 1


@dataclass(frozen=True)
class JobHeader:
    kind: str  # which code runs the tasks (storekit/executors/kinds.py), e.g. "prepare"
    tasks: int
    plan_xxh3_128: str
    meta: dict[str, Any] = field(default_factory=dict)  # what the kind needs beside the plan
    created: float = 0.0
    storekit_version: str = __version__
    job_format: int = JOB_FORMAT


@dataclass(frozen=True)
class InFlight:
    """A task's temp dir: the run `pid` on `host` is writing it (or was, if it died)."""

    index: int
    name: str
    pid: int
    host: str
    pid_start: str | None = None  # the run's start time (clock ticks): a reused pid is not it

    def may_be_alive(self, here: str) -> bool:
        """False only when its run is known dead: on this host, and its process is gone."""
        if self.host != here:
            return True  # another node's run: only its scheduler knows
        return process_alive(self.pid, self.pid_start)


@dataclass(frozen=True)
class TaskScan:
    """Task indexes by record, from one listing of tasks/ and one of failed/."""

    done: frozenset[int]
    failed: frozenset[int]
    in_flight: tuple[InFlight, ...]


@dataclass(frozen=True)
class Submission:
    executor: str
    job_id: str
    array: str | None = None  # e.g. "0-99%8": the array elements submitted
    batches: list[list[int]] | None = None  # element -> plan tasks, when an element runs several
    submitted: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class JobDir:
    def __init__(self, path: Path, *, anchor: Path | None = None, owner: int | None = None) -> None:
        """`anchor`: the trusted directory above it (its tier's root; None: $HOME or `/`); `owner`:
        whose private dir it must be (default: the running user's; root reclaiming: the owner's)."""
        self.path = path
        self.anchor = anchor
        self.owner = owner
        self.pin: DirPin | None = None  # what `path` was when this run first made or checked it
        self.held: HeldDir | None = None  # that directory, open: what feeds a commit is read through it
        self.tasks = path / "tasks"
        self.failed = path / "failed"
        # what names this run's temp dirs; forked workers keep their parent's, so a run (not a
        # process) owns its temps and `remove_temps(own=True)` never touches another run's
        # (the start time beside the pid: after a wrap a dead run's pid may name a live process)
        pid = os.getpid()
        start = process_start(pid)
        self.run_tag = f"{pid}{'-' + start if start else ''}@{socket.gethostname()}"

    @property
    def plan_file(self) -> Path:
        return self.path / PLAN

    @property
    def header_file(self) -> Path:
        return self.path / HEADER

    def task_dir(self, index: int) -> Path:
        return self.tasks / f"{index:06d}"

    # -- the plan (submitting process only) ------------------------------------------------------
    def write_plan(
        self, plan: bytes, *, kind: str, tasks: int, meta: dict[str, Any] | None = None
    ) -> JobHeader:
        """plan.json, then job.json naming its digest: both appear whole; job.json last."""
        header = JobHeader(
            kind=kind,
            tasks=tasks,
            plan_xxh3_128=xxhash.xxh3_128_hexdigest(plan),
            meta=dict(meta or {}),
            created=time.time(),
        )
        with io_errors(self.path):
            write_file_atomic(self.plan_file, plan, mode=0o600)
            faults.point("jobs.plan-written")
            self._header_record().write(asdict(header), sync_dir=False)
        return header

    def read(self, rel: str) -> bytes:
        """A file below the work dir: through the held descriptor once this run made or checked
        the dir (a rename of it or of its parents cannot substitute it), else by name."""
        if self.held is not None:
            return self.held.read_bytes(rel)
        return (self.path / rel).read_bytes()

    def at(self, rel: str) -> Path:
        """A name for `rel` below the work dir that resolves through the held descriptor (for what
        takes a path: numpy, the finalize scratch files)."""
        return self.held.via(rel) if self.held is not None else self.path / rel

    def _header_record(self) -> RecordFile:
        hint = f"remove {self.path} and rerun the command that made it"
        return RecordFile(self.header_file, "job record", JOB_FORMAT, version_key="job_format", hint=hint)

    def header(self) -> JobHeader:
        record = self._header_record()
        try:
            data = self.read(HEADER)
        except FileNotFoundError:
            raise NotFoundError(
                f"{self.path} is not a job work dir (no {HEADER})",
                hint="give the work dir a storekit job runs in (it holds plan.json and job.json)",
            ) from None
        except OSError as exc:
            raise record.damaged(exc.strerror or str(exc)) from None
        doc = record.parse(data)
        return JobHeader(**{f.name: doc[f.name] for f in fields(JobHeader) if f.name in doc})

    def read_plan(self, header: JobHeader | None = None) -> bytes:
        """The plan's bytes, checked against job.json's digest (MismatchError, exit 4)."""
        header = header or self.header()
        with io_errors(self.plan_file):
            data = self.read(PLAN)
        if xxhash.xxh3_128_hexdigest(data) != header.plan_xxh3_128:
            raise MismatchError(
                f"{self.plan_file}: differs from the digest in {self.header_file}",
                hint=f"the work dir was changed behind storekit's back; remove {self.path} and rerun",
            )
        return data

    # -- task records ----------------------------------------------------------------------------
    def scan(self) -> TaskScan:
        done: set[int] = set()
        flying: list[InFlight] = []
        for name in _names(self.tasks):
            if name.isdigit():
                done.add(int(name))  # a final name exists only after the whole dir was renamed
            elif (job := _in_flight(name)) is not None:
                flying.append(job)
        failed = {int(n[:-5]) for n in _names(self.failed) if n.endswith(".json") and n[:-5].isdigit()}
        return TaskScan(frozenset(done), frozenset(failed), tuple(flying))

    def done_tasks(self) -> set[int]:
        return {int(n) for n in _names(self.tasks) if n.isdigit()}

    def is_done(self, index: int) -> bool:
        return self.task_dir(index).is_dir()

    def read_done(self, index: int) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.read(f"tasks/{index:06d}/{DONE}"))
        return doc

    def new_task_dir(self, index: int) -> Path:
        tmp = self.tasks / f".{index:06d}{TMP_MARK}{self.run_tag}.{uuid.uuid4().hex[:8]}"
        with io_errors(tmp):  # no parents: a work dir finalize removed must not come back as a husk
            tmp.mkdir()
        return tmp

    def commit_task(self, tmp: Path, index: int) -> None:
        """The completion record: the task's directory appears under its final name, whole."""
        final = self.task_dir(index)
        with io_errors(final):
            for part in tmp.iterdir():
                fsync_file(part)
            faults.point("jobs.before-commit")
            try:
                os.rename(tmp, final)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                shutil.rmtree(tmp)  # someone else finished the same task: theirs is as good
            fsync_dir(self.tasks)

    def check_parts(self, index: int, record: dict[str, Any]) -> None:
        """Every part of task `index` is what its completion record's `parts` says (exit 4)."""
        folder = self.task_dir(index)
        parts = record.get("parts")
        if not isinstance(parts, dict):
            raise MismatchError(
                f"{folder / DONE}: the completion record lists no part digests",
                hint=f"remove {self.path} (not written by this storekit version) and rerun",
            )
        rel = f"tasks/{index:06d}"
        listed = self.held.listdir(rel) if self.held is not None else os.listdir(folder)
        on_disk = {n for n in listed if n != DONE}
        for name in sorted(on_disk | set(parts)):
            expected = parts.get(name)
            try:
                got = self._part_digest(f"{rel}/{name}")
            except FileNotFoundError:
                got = None
            if expected is None or got is None or [got.size, got.xxh3_128] != expected:
                raise MismatchError(
                    f"{folder / name}: differs from the task's completion record "
                    f"({'not listed' if expected is None else 'missing' if got is None else 'other bytes'})",
                    hint=f"the work dir was changed behind storekit's back; remove {self.path} and rerun",
                )

    def _part_digest(self, rel: str) -> FileDigest:
        if self.held is None:
            return part_digest(self.path / rel)
        with self.held.open(rel) as fh:
            return hash_stream(fh.read)

    def record_failure(
        self,
        index: int,
        error: str,
        *,
        exit_code: int,
        log: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """failed/NNNNNN.json, whole; the newest failure of a task replaces the older one."""
        doc = {
            "task": index,
            "error": error,
            "exit_code": exit_code,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "log": log,
            "time": time.time(),
            **(extra or {}),
        }
        with io_errors(self.failed):
            self.failed.mkdir(exist_ok=True)
            write_file_atomic(self.failure_file(index), json.dumps(doc, indent=1).encode(), mode=0o600)

    def failure_file(self, index: int) -> Path:
        return self.failed / f"{index:06d}.json"

    def read_failure(self, index: int) -> dict[str, Any] | None:
        try:
            doc: dict[str, Any] = json.loads(self.failure_file(index).read_bytes())
        except FileNotFoundError:
            return None
        return doc

    def clear_failure(self, index: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.failure_file(index).unlink()

    def remove_temps(self, *, own: bool = False) -> None:
        """Temp dirs of unfinished tasks; `own`: only this run's (array tasks share the dir)."""
        mark = f"{TMP_MARK}{self.run_tag}."
        for parent in (self.path, self.tasks, self.failed):
            for name in _names(parent):
                if (mark in name) if own else (TMP_MARK in name):
                    # tombstone first: a commit still renaming this dir then fails instead of
                    # publishing a half-removed task, and a failing removal is raised, not hidden
                    with io_errors(parent / name):
                        remove_tree(parent / name)

    def remove_dead_temps(self) -> int:
        """Temp dirs of runs on this host that died (SIGKILL, out of memory): a rerun's tasks take
        no lock, so this is what clears them. Tombstone first: a run wrongly thought dead (a pid
        in another namespace) then fails its commit cleanly instead of renaming a half-removed dir."""
        here = socket.gethostname()
        dead = [f for f in self.scan().in_flight if not f.may_be_alive(here)]
        with io_errors(self.tasks):
            for flying in dead:
                remove_tree(self.tasks / flying.name)
        return len(dead)

    # -- submissions (submitting process only) ---------------------------------------------------
    def record_submission(self, sub: Submission) -> None:
        subs = [asdict(s) for s in self.submissions()]
        subs.append(asdict(sub))
        with io_errors(self.path):
            write_file_atomic(self.path / SUBMISSIONS, json.dumps(subs, indent=1).encode(), mode=0o600)

    def submissions(self) -> list[Submission]:
        try:
            docs = json.loads((self.path / SUBMISSIONS).read_bytes())
        except FileNotFoundError:
            return []
        return [Submission(**d) for d in docs]

    # -- lifecycle -------------------------------------------------------------------------------
    def create(self) -> None:
        with io_errors(self.path):
            self._make_private()
            self.tasks.mkdir(exist_ok=True)
            self.failed.mkdir(exist_ok=True)

    def reset_tasks(self) -> None:
        """Drop every task record (a new plan): tombstone-first, then empty dirs again."""
        with io_errors(self.path):
            for folder in (self.tasks, self.failed):
                remove_tree(folder)
                folder.mkdir()

    @contextlib.contextmanager
    def leased(self) -> Iterator[Lease]:
        """One submitting run per work dir at a time: the loser gets BusyError (exit 5)."""
        with io_errors(self.path):
            self._make_private()
            lease = Lease(dir_lease_path(self.path), purpose=f"using the work dir {self.path}")
            lease.acquire()
        try:
            yield lease
        finally:
            lease.release()

    def _make_private(self) -> None:
        make_private_dir(self.path, self.anchor, self.owner)
        if self.pin is None:
            # opened once, right after the checks, and checked again as opened: later reads that
            # feed the commit go through this descriptor, whatever is renamed afterwards
            held = HeldDir(self.path)
            st = os.fstat(held.fd)
            uid = os.geteuid() if self.owner is None else self.owner
            if st.st_uid != uid or st.st_mode & 0o022:
                held.close()
                check_private(self.path, self.owner)  # what the name leads to now: one error line
                raise MismatchError(f"work dir {self.path} changed while it was checked: refusing it")
            self.pin, self.held = DirPin(self.path, st.st_dev, st.st_ino), held
        else:
            self.pin.check()

    def check_pin(self) -> None:
        """Before publishing what was read from it: the work dir is still the one this run made."""
        if self.pin is not None:
            self.pin.check()

    def remove(self) -> None:
        """Tombstone first: a stop during the delete leaves a tombstone, never a half-removed dir."""
        remove_tree(self.path)

    def clear_tombstones(self) -> None:
        """Tombstones of this work dir only: another run may be deleting its own right now."""
        prefix = f".{self.path.name}{TOMBSTONE_MARK}"
        for name in _names(self.path.parent):
            if name.startswith(prefix):
                remove_path(self.path.parent / name)
        for name in _names(self.path):
            if TOMBSTONE_MARK in name:
                remove_path(self.path / name)


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


def _in_flight(name: str) -> InFlight | None:
    """`.000012.storekit-tmp-PID[-START]@HOST.RAND` -> task 12, PID, START, HOST (None for others)."""
    head, mark, tag = name.partition(TMP_MARK)
    if not mark or not head.startswith(".") or not head[1:].isdigit():
        return None
    ident, at, rest = tag.partition("@")
    pid, _, start = ident.partition("-")
    host = rest.rpartition(".")[0]
    if not at or not pid.isdigit() or not host or not (start.isdigit() or start == ""):
        return None
    return InFlight(int(head[1:]), name, int(pid), host, start or None)


def part_digest(path: Path) -> FileDigest:
    return hash_local(path)


def make_private_dir(path: Path, anchor: Path | None = None, owner: int | None = None) -> None:
    """Create `path` 0700 if missing; refuse one that someone else could have planted or can change,
    or whose parents let someone else swap it (below `anchor`, see storekit.trusted_dirs)."""
    check_ancestors(path, anchor, "work dir")
    path.parent.mkdir(parents=True, exist_ok=True)
    check_ancestors(path, anchor, "work dir")  # what mkdir made is ours; what was there is checked
    if owner is None:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    check_private(path, owner)


def check_private(path: Path, owner: int | None = None) -> None:
    """Raise unless `path` is a real directory of the running user (or of `owner`, which only root
    passes) that only it may write to."""
    st = os.lstat(path)
    problem = None
    uid = os.geteuid() if owner is None else owner
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        problem = "is not a directory (a symlink or a file)"
    elif st.st_uid != uid:
        problem = f"is owned by uid {st.st_uid}, not by the user running storekit (uid {os.geteuid()})"
    elif st.st_mode & 0o022:
        problem = f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    if problem:
        raise StorekitError(
            f"work dir {path} {problem}: refusing to use it (a work dir must be private)",
            hint="remove it if it is yours, or give this run its own --work-dir",
        )


def remove_path(path: Path) -> None:
    """Best effort: a tombstone or a task's temp dir (never a name others read) goes the way durable
    removes tombstones; a failure is left for the next run or `layout clean` (callers are on an
    error path, or tidying up)."""
    with contextlib.suppress(OSError):
        remove_tombstone(str(path))


def io_errors(path: Path) -> contextlib.AbstractContextManager[None]:
    """OS errors on the work dir become storekit errors naming the path (ENOSPC: exit 6)."""
    return storage_errors(str(path), hints={NoSpaceError: _NO_SPACE_HINT})


_NO_SPACE_HINT = "free space or point --work-dir at a larger file system; rerun to resume"
