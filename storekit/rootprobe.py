"""A deadline on the first metadata calls on a tier root that sits on a shared file system.

While a CephFS metadata server (or a Lustre MDT, an NFS server) is down, `statfs`, `stat` and
`opendir` on the mount block in uninterruptible sleep for as long as the outage lasts: no signal ends
them, not even SIGKILL, and a thread stuck so keeps its whole process from exiting. So the first calls
(statfs, stat, the first listing entry) run in a detached grandchild process with its stdio on
/dev/null and every other descriptor closed; past the deadline the tier is reported down (exit 5,
tier_up 0) naming the mount, and this process goes on and exits normally. A grandchild stuck in the
kernel finishes, unseen, whenever the mount answers again (it belongs to init, not to us).

Only mounts of the types below are probed this way (a local disk does not stall like that); the
deadline is STOREKIT_MOUNT_DEADLINE seconds (default 30; 0 turns the probe off).
"""

from __future__ import annotations

import errno
import os
import select
from collections.abc import Iterable

from storekit.errors import UnreachableError
from storekit.mounts import Mount, mount_table

ENV = "STOREKIT_MOUNT_DEADLINE"
DEFAULT_DEADLINE_S = 30.0
MAY_BLOCK = frozenset(
    {
        "ceph",
        "lustre",
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "gpfs",
        "wekafs",
        "beegfs",
        "glusterfs",
        "9p",
        "orangefs",
    }
)


def _may_block(fs_type: str) -> bool:
    return fs_type in MAY_BLOCK or fs_type.startswith("fuse.")


def mount_by_name(path: str, table: Iterable[Mount]) -> Mount | None:
    """The mount holding `path` by its name alone: no call on the path itself, which could block."""
    where = os.path.abspath(path)
    best: Mount | None = None
    for m in table:
        if (where == m.point or where.startswith(m.point.rstrip("/") + "/")) and (
            best is None or len(m.point) >= len(best.point)
        ):
            best = m
    return best


def deadline_s() -> float:
    raw = os.environ.get(ENV, "")
    try:
        return float(raw) if raw else DEFAULT_DEADLINE_S
    except ValueError:
        return DEFAULT_DEADLINE_S


def _touch_root(root: str) -> int:
    """statfs, stat and the first listing entry of `root` (or of its parent while it does not exist);
    0, or the errno that failed."""
    try:
        path = root if os.path.lexists(root) else os.path.dirname(root)
        os.statvfs(path)
        os.stat(path)
        with os.scandir(path) as it:
            next(it, None)
    except OSError as exc:
        return exc.errno or errno.EIO
    return 0


def _in_grandchild(root: str, seconds: float) -> int | None:
    """_touch_root(root) in a detached grandchild; None when it did not answer within `seconds`."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: fork the grandchild and leave at once, so that nothing waits on it
        try:
            os.close(r)
            if os.fork() == 0:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.closerange(3, w)  # none of the caller's pipes may stay open in a stuck process
                os.closerange(w + 1, 65536)
                os.write(w, str(_touch_root(root)).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        os.waitpid(pid, 0)
        poller = select.poll()  # not select(): a busy process may hold descriptors past 1024
        poller.register(r, select.POLLIN)
        ready = poller.poll(seconds * 1000)
        return int(os.read(r, 16) or b"0") if ready else None
    finally:
        os.close(r)


def guard_root(root: str, tier: str, *, table: Iterable[Mount] | None = None) -> None:
    """Raise UnreachableError (exit 5) naming the mount when `root`'s file system does not answer its
    first metadata calls within the deadline; errors it does answer are left to the caller's calls."""
    seconds = deadline_s()
    if seconds <= 0:
        return
    mount = mount_by_name(root, mount_table() if table is None else table)
    if mount is None or not _may_block(mount.fs_type):
        return
    if _in_grandchild(root, seconds) is None:
        raise UnreachableError(
            f"tier {tier}: {root} on the {mount.fs_type} mount {mount.point} ({mount.source}) did not "
            f"answer statfs/stat/listing within {seconds:g} s",
            hint="its metadata server may be down or stalled; storekit did not wait longer "
            f"(set {ENV}=SECONDS to change the deadline)",
        )
