"""Reclaiming what killed `bench io` runs left in `scratch/`: our own runs only, and only dead ones.

Every POSIX run writes an owner record into its run directory right after creating it (pid, uid, host,
boot id and the process's start time). A later run removes a predecessor's directory only when all of
these hold: it is a real directory named `storekit-bench-*`, owned by our uid, holding an owner record
owned by our uid that names our uid and this host, and that process is provably gone: the machine has
rebooted since, no process has that pid, or the pid now belongs to a process started at another time.
A run on another node of a shared filesystem, another user's run, or anything without a record is
never touched. Removal is tombstone-first (rename, fsync, delete), so a kill during it leaves a
tombstone the next run finishes, never a half-deleted directory under its real name.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
from typing import Any

from storekit.bench.plan import RUN_PREFIX
from storekit.durable import TOMBSTONE_MARK, fsync_dir, remove_tombstone, remove_tree, write_file_atomic
from storekit.liveness import boot_id, process_alive, process_start

OWNER_FILE = ".storekit-bench-owner.json"


def owner_record() -> dict[str, Any]:
    pid = os.getpid()
    start = process_start(pid)
    return {
        "pid": pid,
        "uid": os.getuid(),
        "host": socket.gethostname(),
        "boot_id": boot_id(),
        "start_ticks": None if start is None else int(start),
    }


def write_owner(run_root: str) -> None:
    """The record appears whole or not at all (temp + fsync + rename), and durably."""
    write_file_atomic(os.path.join(run_root, OWNER_FILE), json.dumps(owner_record()).encode(), mode=0o644)
    fsync_dir(run_root)


def is_dead(record: dict[str, Any]) -> bool:
    """True only when the process the record names has provably ended (a record without a valid pid
    proves nothing)."""
    pid, ticks = record.get("pid"), record.get("start_ticks")
    if not isinstance(pid, int) or pid <= 0:
        return False
    start = str(ticks) if isinstance(ticks, int) else None
    return not process_alive(pid, start, boot=record.get("boot_id") or None)


def _read_owner(run_dir: str) -> dict[str, Any] | None:
    """The owner record, if it is a regular file of ours (never followed through a link)."""
    path = os.path.join(run_dir, OWNER_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size > 4096:
            return None
        record = json.loads(os.read(fd, 4096))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return record if isinstance(record, dict) else None


def dead_runs(scratch: str) -> list[tuple[str, dict[str, Any]]]:
    """Run directories in `scratch` that this user's dead bench processes on this host left behind."""
    uid, host = os.getuid(), socket.gethostname()
    found = []
    try:
        entries = list(os.scandir(scratch))
    except OSError:
        return []
    for entry in sorted(entries, key=lambda e: e.name):
        if not entry.name.startswith(RUN_PREFIX):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            continue
        record = _read_owner(entry.path)
        if record and record.get("uid") == uid and record.get("host") == host and is_dead(record):
            found.append((entry.path, record))
    return found


def _our_tombstones(scratch: str) -> list[str]:
    """Bench run directories whose removal a kill interrupted (ours only)."""
    out = []
    with contextlib.suppress(OSError), os.scandir(scratch) as entries:
        for e in entries:
            if e.name.startswith("." + RUN_PREFIX) and TOMBSTONE_MARK in e.name:
                st = e.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
                    out.append(e.path)
    return sorted(out)


def _bytes_under(path: str) -> int:
    total = 0
    for top, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
    return total


def reclaim_dead_runs(scratch: str) -> list[dict[str, Any]]:
    """Remove the dead predecessors' run directories; what was removed, for --json."""
    done = []
    for path in _our_tombstones(scratch):
        size = _bytes_under(path)
        with contextlib.suppress(OSError):  # what cannot be removed stays a tombstone, for next time
            remove_tombstone(path)  # already renamed away: no half-deleted real name
        done.append({"run_dir": path, "pid": None, "bytes": size, "why": "interrupted removal"})
    for path, record in dead_runs(scratch):
        size = _bytes_under(path)
        remove_tree(path)
        done.append({"run_dir": path, "pid": record["pid"], "bytes": size, "why": "owner process is gone"})
    return done
