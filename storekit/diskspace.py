"""Free space for a path: the one statvfs reading every command uses (status, prepare, bench, stores)."""

from __future__ import annotations

import os


def nearest_existing(path: str) -> str:
    """`path` or its closest existing ancestor: free space of a directory not created yet is its parent's."""
    while not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def usage(path: str) -> tuple[int, int] | None:
    """(bytes free to an unprivileged writer, bytes in total) of the file system `path` is (or would
    be created) on.

    None when the file system does not say: ramfs and some FUSE mounts report zero blocks in total,
    which is not "full".
    """
    st = os.statvfs(nearest_existing(path))
    if not st.f_blocks:
        return None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use where `path` is (or would be created); None: unknown."""
    known = usage(path)
    return None if known is None else known[0]
