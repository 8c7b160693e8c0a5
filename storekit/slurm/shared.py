"""Refusing paths that array elements on other nodes could not see (before anything is submitted).

A path is node-local when it lies on a `burst` tier, or its file system type (from the kernel's mount
table, the type `statfs` reports) is one a node keeps to itself: tmpfs, a local disk's ext4/xfs/btrfs.
Network and parallel file systems (NFS, Lustre, CephFS, GPFS, BeeGFS, ...) are shared. A cluster
whose nodes all run on this very host (emulated nodes: every NodeAddr is a loopback address) shares
even local disks, so they pass there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from storekit.config import SiteConfig
from storekit.errors import UsageError

ALWAYS_LOCAL = frozenset({"tmpfs", "ramfs", "devtmpfs", "overlay", "squashfs", "zram"})
LOCAL_DISK = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "vfat", "exfat", "bcachefs"})


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str


def mounts(mountinfo: str | None = None) -> list[Mount]:
    """Mount points and types from /proc/self/mountinfo (escaped spaces decoded)."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    out = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        point = fields[4].encode().decode("unicode_escape")  # \040 for a space
        out.append(Mount(point=point, fstype=right.split()[0]))
    return out


def fs_type(path: str, table: Iterable[Mount] | None = None) -> str:
    """The type of the file system holding `path` (its deepest mount point wins)."""
    real = os.path.realpath(path)  # links resolved; a path not made yet is fine
    best = Mount("/", "unknown")
    for m in table if table is not None else mounts():
        inside = real == m.point or real.startswith(m.point.rstrip("/") + "/")
        if inside and len(m.point) >= len(best.point):
            best = m
    return best.fstype


def node_local_reason(
    path: str, site: SiteConfig | None, *, single_host: bool, table: Iterable[Mount] | None = None
) -> str | None:
    """Why `path` cannot be seen from other nodes, or None when it can."""
    for tier in site.tiers.values() if site is not None else ():
        root = tier.url.removeprefix("file://") if tier.url.startswith("file://") else None
        if tier.role == "burst" and root and _inside(path, root):
            return f"it is on tier {tier.name!r}, a burst tier (node-local)"
    kind = fs_type(path, table)
    if kind in ALWAYS_LOCAL:
        return f"it is on a {kind} file system, which every node has its own of"
    if kind in LOCAL_DISK and not single_host:
        return f"it is on a local {kind} disk, which other nodes cannot see"
    return None


def _inside(path: str, root: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip("/") + "/")


def refuse_node_local(
    paths: Iterable[tuple[str, str]], site: SiteConfig | None, *, single_host: bool
) -> None:
    """Raise (exit 2) for the first (what, path) other nodes could not see."""
    for what, path in paths:
        reason = node_local_reason(path, site, single_host=single_host)
        if reason is not None:
            raise UsageError(
                f"{what} {path} is node-local: {reason}; array elements on other nodes could not read it",
                hint="put it on a shared file system (a parallel tier, NFS, Lustre), or use --executor local",
            )


def all_on_this_host(node_addrs: Iterable[str]) -> bool:
    """True when every node's address is this host (loopback): one machine emulating a cluster."""
    addrs = list(node_addrs)
    return bool(addrs) and all(a.startswith("127.") or a in ("localhost", "::1") for a in addrs)
