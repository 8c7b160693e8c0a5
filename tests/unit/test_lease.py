"""Leases without flock: one holder at a time, a safe staleness rule (same host: the process is
alive; other host: the expiry), stale leases broken without ever removing a live one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storekit.errors import BusyError, ExitCode
from storekit.jobs.reclaim import abandoned, reclaim_work_dir, work_dir_state
from storekit.lease import Lease, break_stale, covering_lease, read_lease, sibling_lease_path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write(path: Path, **fields: object) -> None:
    doc = {"token": "t", "user": "u", "uid": 1, "host": socket.gethostname(), "pid": os.getpid()}
    doc |= {"acquired": time.time(), "expires": time.time() + 300, **fields}
    path.write_text(json.dumps(doc))


def test_one_holder_at_a_time_and_release(tmp_path: Path) -> None:
    path = tmp_path / ".v1.storekit-lease"
    with Lease(path, purpose="writing x") as first:
        assert first.held()
        with pytest.raises(BusyError) as info:
            Lease(path, purpose="writing x").acquire()
        assert info.value.exit_code == ExitCode.RETRYABLE
        assert f"pid {os.getpid()}" in info.value.message
        assert read_lease(path) is not None and read_lease(path).binds()  # type: ignore[union-attr]
    assert not path.exists()
    assert not list(tmp_path.iterdir())  # no temp files left


def test_a_dead_process_lease_on_this_host_is_broken(tmp_path: Path) -> None:
    path = tmp_path / ".v1.storekit-lease"
    _write(path, pid=_dead_pid(), expires=time.time() + 3600)  # unexpired, but its process is gone
    assert not read_lease(path).binds()  # type: ignore[union-attr]
    with Lease(path, purpose="writing x") as lease:
        assert lease.held()


def test_a_reused_pid_does_not_keep_a_lease_alive(tmp_path: Path) -> None:
    path = tmp_path / ".v1.storekit-lease"
    _write(path, pid=os.getpid(), pid_start="1")  # our pid, another process's start time
    assert not read_lease(path).binds()  # type: ignore[union-attr]


def test_another_hosts_lease_binds_until_it_expires(tmp_path: Path) -> None:
    path = tmp_path / ".v1.storekit-lease"
    _write(path, host="node-that-vanished", pid=1, expires=time.time() + 60)
    with pytest.raises(BusyError, match="node-that-vanished"):
        Lease(path, purpose="writing x").acquire()
    _write(path, host="node-that-vanished", pid=1, expires=time.time() - 1)
    with Lease(path, purpose="writing x") as lease:
        assert lease.held()


def test_a_damaged_lease_binds_for_one_ttl_from_its_mtime(tmp_path: Path) -> None:
    path = tmp_path / ".v1.storekit-lease"
    path.write_text("{half")
    assert read_lease(path).binds()  # type: ignore[union-attr]
    os.utime(path, (time.time() - 3600, time.time() - 3600))
    assert not read_lease(path).binds()  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["fifo", "symlink", "oversized"])
def test_what_storekit_never_writes_as_a_lease_is_not_read_and_binds_nobody(
    tmp_path: Path, kind: str
) -> None:
    """A neighbour's trap at a lease's name in a shared (sticky) directory: a FIFO (opening it for
    reading would block forever), a link (to a live lease elsewhere, or to /dev/zero), a file no
    lease is the size of. It is not a lease: no run waits on it, the next one breaks it."""
    path = tmp_path / ".v1.storekit-lease"
    elsewhere = tmp_path / "elsewhere"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        _write(elsewhere)  # a lease this live process holds, as far as its contents go
        path.symlink_to(elsewhere)
    else:
        _write(path, purpose="x" * (80 << 10))  # this live process, padded past any real lease
    info = read_lease(path)
    assert info is not None and not info.binds()
    assert info.purpose.startswith("not a lease: ") and info.uid == os.geteuid()
    with Lease(path, purpose="writing x") as lease:  # broken and taken, not waited on
        assert lease.held()
    assert not path.exists()
    if kind == "symlink":
        assert elsewhere.exists()  # the link was removed, never followed


def test_breaking_a_stale_lease_never_removes_a_fresh_one(tmp_path: Path) -> None:
    """Two processes saw the same stale lease; the first broke it and took a fresh one; the
    second's break must put the fresh one back."""
    path = tmp_path / ".v1.storekit-lease"
    _write(path, token="stale", pid=_dead_pid())
    stale = read_lease(path)
    assert stale is not None
    with Lease(path, purpose="writing x") as fresh:  # breaks `stale` itself
        assert not break_stale(stale)  # the late breaker moves the fresh lease away and back
        assert fresh.held()
        fresh.check()
    assert not list(tmp_path.iterdir())


def test_a_lost_lease_is_noticed_before_the_next_step(tmp_path: Path) -> None:
    path = tmp_path / ".v1.storekit-lease"
    lease = Lease(path, purpose="writing x")
    lease.acquire()
    try:
        _write(path, token="someone else")
        with pytest.raises(BusyError, match="lost its lease"):
            lease.check()
    finally:
        lease.release()
    assert path.exists()  # not ours: release leaves it


def test_covering_lease_names(tmp_path: Path) -> None:
    final = tmp_path / "datasets" / "v1"
    final.parent.mkdir(parents=True)
    staging = final.parent / ".v1.storekit-tmp-abc"
    staging.mkdir()
    assert covering_lease(staging, tmp_path) is None
    with Lease(sibling_lease_path(final), purpose="writing v1"):
        assert covering_lease(staging, tmp_path) is not None
        assert covering_lease(final.parent / ".v2.storekit-tmp-abc", tmp_path) is None
    work = tmp_path / "scratch" / "w"
    (work / "tasks").mkdir(parents=True)
    with Lease(work / ".storekit-lease", purpose="using w"):
        assert covering_lease(work / "tasks" / ".000001.storekit-tmp-x", tmp_path) is not None


def test_abandoned_work_dirs(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "plan.json").write_text("{}")
    later = time.time() + 7200
    with Lease(work / ".storekit-lease", purpose="using w"):
        assert work_dir_state(work).live
        assert not abandoned(work, idle_for=3600, now=later)
    state = work_dir_state(work, now=later)
    assert not state.live and state.idle_seconds >= 7000 and state.owner_uid == os.geteuid()
    assert abandoned(work, idle_for=3600, now=later)
    assert not abandoned(work, idle_for=3600)  # changed just now


def test_reclaim_removes_only_an_abandoned_work_dir(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir(mode=0o700)
    (work / "plan.json").write_text("{}")
    (work / "tasks").mkdir()
    old = time.time() - 7200
    for p in (work / "plan.json", work / "tasks", work):
        os.utime(p, (old, old))
    with Lease(work / ".storekit-lease", purpose="using w"):
        assert not reclaim_work_dir(work, idle_for=3600)  # a live run holds it
    os.utime(work, (old, old))
    assert not reclaim_work_dir(work, idle_for=3 * 3600)  # not idle long enough
    assert reclaim_work_dir(work, idle_for=3600)
    assert not work.exists() and not list(tmp_path.iterdir())  # tombstone gone too
