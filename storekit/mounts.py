"""Which mount a path is on (file system type, source, options), read from /proc/self/mountinfo.

Used where behaviour depends on the file system: a store's probed capabilities, the environment a
benchmark result was measured in, and whether other nodes of a Slurm cluster can see a path.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MOUNTINFO = "/proc/self/mountinfo"


@dataclass(frozen=True)
class Mount:
    point: str
    fs_type: str
    source: str = ""
    options: str = ""  # per-mount options (rw, nosuid, relatime, ...)
    super_options: str = ""  # the file system's own (stripe settings, ...)
    dev: str = ""  # major:minor

    def to_dict(self) -> dict[str, Any]:
        return {
            "mount_point": self.point,
            "fs_type": self.fs_type,
            "source": self.source,
            "mount_options": self.options,
            "super_options": self.super_options,
            "dev": self.dev,
        }


def _unescape(field: str) -> str:
    """The kernel writes space, tab, newline and backslash in octal; every other byte is as it is."""
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a mountinfo table, in its order (malformed lines skipped)."""
    out = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 6 or len(rest) < 2:
            continue
        out.append(
            Mount(
                point=_unescape(fields[4]),
                fs_type=rest[0],
                source=_unescape(rest[1]),
                options=fields[5],
                super_options=rest[2] if len(rest) > 2 else "",
                dev=fields[2],
            )
        )
    return out


def mount_table(mountinfo: str = MOUNTINFO) -> list[Mount]:
    """This process's mounts; empty when the table cannot be read (then nothing is known)."""
    try:
        with open(mountinfo) as fh:
            return parse_mountinfo(fh.read())
    except OSError:
        return []


def deepest_mount(path: str, table: Iterable[Mount]) -> Mount | None:
    """The mount holding `path`: the longest mount point containing its real path (links resolved; a
    path not created yet is fine); among equal points the last mounted, which hides the others."""
    real = os.path.realpath(path)
    best: Mount | None = None
    for m in table:
        inside = real == m.point or real.startswith(m.point.rstrip("/") + "/")
        if inside and (best is None or len(m.point) >= len(best.point)):
            best = m
    return best


def mount_of(path: str, mountinfo: str = MOUNTINFO) -> dict[str, Any] | None:
    """The mount holding `path`, as the dict capabilities and bench results record."""
    mount = deepest_mount(path, mount_table(mountinfo))
    return mount.to_dict() if mount is not None else None


def mount_mismatch(
    path: str, fs_type: str | None, source: str | None, mountinfo: str = MOUNTINFO
) -> str | None:
    """Why `path` is not on a mount of type `fs_type` from `source` (None: it is, or nothing was asked).

    An unmounted Lustre or NFS mount point is a directory of the root file system: writing there
    fills the wrong disk and reading it shows an empty tier, so the tier counts as down.
    """
    if not fs_type and not source:
        return None
    table = mount_table(mountinfo)
    if not table:
        return f"cannot read {mountinfo} to check that {path} is mounted"
    mount = deepest_mount(path, table)
    if mount is None:
        return f"{path} is on no mount listed in {mountinfo}"
    if fs_type and mount.fs_type != fs_type:
        return f"{path} is on {mount.point} ({mount.fs_type} from {mount.source}), not a {fs_type} mount"
    if source and mount.source != source:
        return f"{path} is on {mount.point} mounted from {mount.source}, not from {source}"
    return None
