"""Leases: who is working on a path right now, without flock (unreliable on Lustre and NFS).

A lease is a small JSON file that appears whole and only once: it is written to a temp name and
hard-linked to its final name (link(2) fails when the name exists, on NFS too). It names the holder
(user, uid, host, pid and the pid's start time), a random token and an expiry that a heartbeat
thread pushes forward. Whether a lease still binds:

    same host    its process is alive (same pid, same start time); the expiry is not used
    other host   its expiry is in the future (a host that died lets its leases lapse)

A lease also records the holder's boot id and PID namespace: on the same host, another boot means
the holder is gone; another PID namespace (a container, with its own pid 1) means its pid cannot be
judged here, so it binds until its expiry, like a lease of another host.

A lease that no longer binds is stale and may be broken: renamed to a tombstone, checked, removed.

Names, so that `layout check` and cleaners can tell what a lease covers:

    DIR/.storekit-lease        DIR and everything below it (a job work dir)
    DIR/.NAME.storekit-lease   DIR/NAME and its temp siblings DIR/.NAME.storekit-tmp-* (a staging
                               dir of a dataset or a checkpoint step)
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storekit.durable import TMP_MARK, fsync_dir, remove_write_temps, write_file_atomic
from storekit.errors import BusyError, NotRegularFileError, PermissionDeniedError
from storekit.liveness import boot_id, pid_namespace, process_alive, process_start
from storekit.trusted_dirs import read_small_file

LEASE_NAME = ".storekit-lease"
DEFAULT_TTL = 300.0  # seconds a lease of a process on another host binds without a heartbeat
MAX_LEASE_BYTES = 64 << 10  # a lease is ~400 bytes of JSON; a bigger file is not one


def sibling_lease_path(path: Path) -> Path:
    """The lease that covers `path` and its temp siblings (`.NAME.storekit-tmp-*`)."""
    return path.parent / f".{path.name}{LEASE_NAME}"


def dir_lease_path(directory: Path) -> Path:
    """The lease that covers `directory` and everything below it."""
    return directory / LEASE_NAME


def is_lease_name(name: str) -> bool:
    return name.endswith(LEASE_NAME) and TMP_MARK not in name


@dataclass(frozen=True)
class LeaseInfo:
    path: Path
    token: str
    user: str
    uid: int
    host: str
    pid: int
    pid_start: str | None
    acquired: float
    expires: float
    purpose: str
    where: tuple[str | None, str | None] = (None, None)  # the holder's boot id and PID namespace

    def binds(self, now: float | None = None) -> bool:
        """True while the holder may still be working (see the module docstring for the rule)."""
        if self.host == socket.gethostname():
            boot, namespace = self.where
            if boot is not None and boot_id() not in (None, boot):
                return False  # this host booted since: every process of that boot is gone
            if namespace is None or pid_namespace() in (None, namespace):
                return process_alive(self.pid, self.pid_start)
            # another PID namespace on this host (a container): its pid means nothing here
        return (time.time() if now is None else now) < self.expires

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.acquired))
        if self.pid < 0:  # damaged, or not a lease at all: no holder to name
            return f"{self.purpose}, owned by {self.user}, since {since}"
        return f"pid {self.pid} on {self.host} (user {self.user}, since {since})"


def read_lease(path: Path) -> LeaseInfo | None:
    """The lease at `path`, None when there is none. A damaged one binds until its mtime + TTL.
    What storekit never writes as a lease (a FIFO, a device, a link, a huge file: someone's trap in
    a shared directory) is never opened for reading and binds nobody: the next run breaks it."""
    try:
        data = read_small_file(path, limit=MAX_LEASE_BYTES)
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except NotRegularFileError as exc:
        return _not_a_lease(path, exc)
    try:
        doc = json.loads(data)
        return LeaseInfo(
            path=path,
            token=str(doc["token"]),
            user=str(doc["user"]),
            uid=int(doc["uid"]),
            host=str(doc["host"]),
            pid=int(doc["pid"]),
            pid_start=doc.get("pid_start"),
            acquired=float(doc["acquired"]),
            expires=float(doc["expires"]),
            purpose=str(doc.get("purpose", "")),
            where=(_opt_str(doc.get("boot_id")), _opt_str(doc.get("pid_ns"))),
        )
    except (ValueError, KeyError, TypeError):
        owner, mtime = _user_name(st.st_uid), st.st_mtime
        expires = mtime + DEFAULT_TTL
        return LeaseInfo(path, "", owner, st.st_uid, "?", -1, None, mtime, expires, "damaged lease file")


def _not_a_lease(path: Path, why: NotRegularFileError) -> LeaseInfo | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    what = "not a lease: " + why.message.removeprefix(f"{path}: ").split(";")[0]  # "... (a FIFO)"
    return LeaseInfo(path, "", _user_name(st.st_uid), st.st_uid, "?", -1, None, st.st_mtime, 0.0, what)


def binding_lease(path: Path) -> LeaseInfo | None:
    lease = read_lease(path)
    return lease if lease is not None and lease.binds() else None


def covering_lease(path: Path, root: Path) -> LeaseInfo | None:
    """A binding lease that covers `path` (below `root`): its own sibling lease, or a directory
    lease in it or in any directory above it up to `root`."""
    name = path.name
    base = name[1:].split(TMP_MARK)[0] if name.startswith(".") and TMP_MARK in name else name
    own = f".{base}" if is_lease_name(f".{base}") else f".{base}{LEASE_NAME}"  # a lease's own temp
    lease = binding_lease(path.parent / own)
    if lease is not None:
        return lease
    probe = path
    while True:
        if probe.is_dir() and not probe.is_symlink():
            lease = binding_lease(dir_lease_path(probe))
            if lease is not None:
                return lease
        if probe == root or probe.parent == probe or not probe.is_relative_to(root):
            return None
        probe = probe.parent


class Lease:
    """A lease held by this process; `with Lease(...)` takes it (BusyError, exit 5, when it binds
    someone else), renews it from a heartbeat thread, and releases it."""

    def __init__(self, path: Path, *, purpose: str, ttl: float = DEFAULT_TTL) -> None:
        self.path = path
        self.purpose = purpose
        self.ttl = ttl
        self.token = uuid.uuid4().hex
        self.acquired = 0.0
        self.lost = False
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def _doc(self) -> bytes:
        uid = os.geteuid()
        doc: dict[str, Any] = {
            "token": self.token,
            "purpose": self.purpose,
            "user": _user_name(uid),
            "uid": uid,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pid_start": process_start(os.getpid()),
            "boot_id": boot_id(),
            "pid_ns": pid_namespace(),
            "acquired": self.acquired,
            "expires": time.time() + self.ttl,
        }
        return json.dumps(doc, indent=1).encode()

    def acquire(self) -> None:
        self.acquired = time.time()
        for _ in range(3):
            if self._create():
                self._remove_dead_temps()
                self._start_heartbeat()
                return
            current = read_lease(self.path)
            if current is None:
                continue  # released meanwhile
            if current.binds():
                raise BusyError(
                    f"another storekit process is {self.purpose}: {current.describe()}",
                    hint=f"wait for it to finish and rerun (its lease: {self.path})",
                )
            break_stale(current)
        raise BusyError(
            f"the lease {self.path} for {self.purpose} keeps changing hands", hint="rerun in a moment"
        )

    def _create(self) -> bool:
        tmp = self.path.parent / f".{self.path.name}{TMP_MARK}{uuid.uuid4().hex[:12]}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(self._doc())
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, self.path)
            except (FileExistsError, FileNotFoundError):  # taken; or its holder removed our temp
                return False
            except OSError as exc:  # no hard links here (some FUSE mounts): exclusive create instead
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK):
                    raise
                return self._create_exclusive()
            fsync_dir(self.path.parent)
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _remove_dead_temps(self) -> None:
        """Temps of this lease's writes that a kill left (creating, renewing, breaking it): only the
        holder removes them; a contender whose temp goes meanwhile finds the lease taken."""
        remove_write_temps(self.path)

    def _create_exclusive(self) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as fh:
            fh.write(self._doc())
            fh.flush()
            os.fsync(fh.fileno())
        return True

    def held(self) -> bool:
        """True while the file at our path is still our lease."""
        current = read_lease(self.path)
        return current is not None and current.token == self.token

    def check(self) -> None:
        """Before a step that must not run twice at once: raise BusyError if the lease was lost."""
        if self.lost or not self.held():
            self.lost = True
            raise BusyError(
                f"this run lost its lease ({self.path}) while {self.purpose}: it lapsed or another "
                "process broke it; nothing more was written",
                hint="rerun: finished work is kept",
            )

    def renew(self) -> None:
        if self.lost or not self.held():
            self.lost = True
            return
        write_file_atomic(self.path, self._doc())

    def _start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(self.ttl / 3):
                with contextlib.suppress(OSError):
                    self.renew()

        self._beat = threading.Thread(target=beat, daemon=True, name="storekit-lease")
        self._beat.start()

    def release(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
            self._beat = None
        if self.held():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def break_stale(stale: LeaseInfo) -> bool:
    """Remove a lease that no longer binds; True if it was removed by us.

    Rename first, then look at what was renamed: if another process replaced the stale lease by a
    fresh one in between, that one is put back (link, so never over a newer one) and kept.
    """
    tomb = stale.path.parent / f".{stale.path.name}{TMP_MARK}stale-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(stale.path, tomb)
    except FileNotFoundError:
        return False
    except PermissionError:  # another user's lease in a sticky directory: only they (or root) may
        what = (
            f"a stale lease of user {stale.user} ({stale.describe()}, no longer running)"
            if stale.pid >= 0
            else f"{stale.purpose}, owned by {stale.user},"
        )
        raise PermissionDeniedError(
            f"{stale.path}: {what} that you may not remove",
            hint=f"ask {stale.user} or an administrator to remove it, then rerun",
        ) from None
    moved = read_lease(tomb)
    try:
        if moved is not None and moved.token != stale.token:
            with contextlib.suppress(FileExistsError):
                os.link(tomb, stale.path)
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tomb)


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
