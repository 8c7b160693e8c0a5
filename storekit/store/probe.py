"""What a POSIX directory's file system can do, probed on that directory (read-only: nothing is written).

Per instance, not per class: one PosixStore may sit on ext4 (xattrs, rename), another on a FUSE mount
of an object store (no atomic rename, no xattrs) and a third on Lustre (striping).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

from storekit.diskspace import free_bytes, nearest_existing
from storekit.fsfeatures import CEPHFS_TYPES
from storekit.mounts import mount_of
from storekit.store.base import XATTR_PREFIX, Capabilities

# FUSE views of object stores: rename there is a copy and a delete, not atomic
NON_ATOMIC_RENAME = frozenset(
    {"fuse.s3fs", "fuse.goofys", "fuse.gcsfuse", "fuse.rclone", "fuse.mountpoint-s3", "fuse.geesefs"}
)
LFS_TIMEOUT_S = 10
_NO_XATTRS = (errno.ENOTSUP, errno.EOPNOTSUPP)


def posix_capabilities(root: str) -> Capabilities:
    where = nearest_existing(root)  # a root not created yet will live on its parent's file system
    mount = mount_of(where)
    fs_type = str(mount["fs_type"]) if mount else None
    return Capabilities(
        atomic_rename=fs_type not in NON_ATOMIC_RENAME,
        directories=True,
        posix_modes=True,
        free_space=free_bytes(where) is not None,
        user_metadata=has_user_xattrs(where),
        striping=lfs_works(where, fs_type) or fs_type in CEPHFS_TYPES,
    )


def has_user_xattrs(path: str) -> bool:
    """Reading a name that is not there answers ENODATA where user xattrs exist, ENOTSUP where not."""
    try:
        os.getxattr(path, XATTR_PREFIX + "probe", follow_symlinks=False)
    except OSError as exc:
        return exc.errno not in _NO_XATTRS
    return True


def lfs_works(path: str, fs_type: str | None) -> bool:
    """`lfs setstripe` applies only on Lustre, and only where `lfs getstripe` answers for this path."""
    lfs = shutil.which("lfs")
    if lfs is None or fs_type not in (None, "lustre"):
        return False
    try:
        done = subprocess.run(
            [lfs, "getstripe", "-d", path], capture_output=True, timeout=LFS_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
