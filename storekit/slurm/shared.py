"""Refusing paths that array elements on other nodes could not see (before anything is submitted).

A path is node-local when it lies on a `burst` tier, or its file system type (from the kernel's mount
table, the type `statfs` reports) is one a node keeps to itself: tmpfs, a local disk's ext4/xfs/btrfs.
Network and parallel file systems (NFS, Lustre, CephFS, GPFS, BeeGFS, ...) are shared. A cluster
whose nodes all run on this very host (emulated nodes: every NodeAddr is a loopback address) shares
even local disks, so they pass there.
"""

from __future__ import annotations

from collections.abc import Iterable

from storekit.config import SiteConfig
from storekit.errors import UsageError
from storekit.mounts import Mount, deepest_mount, mount_table
from storekit.paths import resolves_outside

ALWAYS_LOCAL = frozenset({"tmpfs", "ramfs", "devtmpfs", "overlay", "squashfs", "zram"})
LOCAL_DISK = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "vfat", "exfat", "bcachefs"})


def fs_type(path: str, table: Iterable[Mount] | None = None) -> str:
    """The type of the file system holding `path` (its deepest mount point wins)."""
    mount = deepest_mount(path, mount_table() if table is None else table)
    return mount.fs_type if mount is not None else "unknown"


def node_local_reason(
    path: str, site: SiteConfig | None, *, single_host: bool, table: Iterable[Mount] | None = None
) -> str | None:
    """Why `path` cannot be seen from other nodes, or None when it can."""
    for tier in site.tiers.values() if site is not None else ():
        root = tier.local_root
        if tier.role == "burst" and root and resolves_outside(path, root) is None:
            return f"it is on tier {tier.name!r}, a burst tier (node-local)"
    kind = fs_type(path, table)
    if kind in ALWAYS_LOCAL:
        return f"it is on a {kind} file system, which every node has its own of"
    if kind in LOCAL_DISK and not single_host:
        return f"it is on a local {kind} disk, which other nodes cannot see"
    return None


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
