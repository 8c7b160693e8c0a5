"""A unit's tree read as manifest entries (storekit.manifest.UnitEntry), and its fingerprint.

The walk gives every entry (mode, mtime_ns, owner, size; digests are filled in by the copy's reading
pass) and the unit's fingerprint (size, mtime_ns, ctime_ns, inode of every entry): a unit whose
fingerprint changed between copy and free is not freed.
"""

from __future__ import annotations

import os
import stat

from storekit.errors import InputError
from storekit.manifest import DIR, FILE, LINK, UnitEntry


def walk_unit(root: str | os.PathLike[str]) -> list[UnitEntry]:
    """Every entry of the unit at `root` (a directory or a single file), parents before children.

    Symlinks are recorded, never followed. Anything else (fifo, socket, device) is refused: a copy
    could not bring it back.
    """
    root = os.fspath(root)
    top = os.lstat(root)
    if stat.S_ISREG(top.st_mode):
        return [_entry(".", top)]
    if not stat.S_ISDIR(top.st_mode):
        raise InputError(f"{root}: a unit must be a directory or a regular file")
    entries = [_entry(".", top)]
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(os.path.join(root, rel_dir)) as it:
            children = sorted(it, key=lambda e: e.name)
        for child in children:
            rel = f"{rel_dir}/{child.name}" if rel_dir else child.name
            st = child.stat(follow_symlinks=False)
            entry = _entry(rel, st, child.path)
            entries.append(entry)
            if entry.type == DIR:
                stack.append(rel)
    return sorted(entries, key=lambda e: (e.path != ".", e.path))


def _entry(rel: str, st: os.stat_result, full: str = "") -> UnitEntry:
    common = {
        "path": rel,
        "mode": stat.S_IMODE(st.st_mode),
        "mtime_ns": st.st_mtime_ns,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "ctime_ns": st.st_ctime_ns,
        "inode": st.st_ino,
    }
    if stat.S_ISREG(st.st_mode):
        return UnitEntry(type=FILE, size=st.st_size, **common)  # type: ignore[arg-type]
    if stat.S_ISDIR(st.st_mode):
        return UnitEntry(type=DIR, **common)  # type: ignore[arg-type]
    if stat.S_ISLNK(st.st_mode):
        return UnitEntry(type=LINK, target=os.readlink(full), **common)  # type: ignore[arg-type]
    raise InputError(f"{full}: neither a file, a directory nor a symlink; a unit cannot hold it")


def fingerprint(entries: list[UnitEntry]) -> list[list[object]]:
    return [list(e.fingerprint()) for e in entries]
