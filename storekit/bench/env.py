"""The environment a result was measured in: host, kernel, filesystem and mount options, device.

Numbers without this are not comparable: the same disk behind ext4 `data=journal` or XFS, or Lustre
with a different stripe count, gives different results. Read from /proc/self/mountinfo and /sys.
"""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

from storekit import __version__
from storekit.bench.spec import TargetSpec
from storekit.config import mask_url
from storekit.mounts import mount_of

MEMORY_BACKED = ("tmpfs", "ramfs", "devtmpfs")


def ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def block_device(dev: str) -> dict[str, Any] | None:
    """Queue properties of the block device `major:minor` (its parent disk for a partition)."""
    base = f"/sys/dev/block/{dev}"
    if not os.path.exists(base):
        return None
    real = os.path.realpath(base)
    disk = os.path.dirname(real) if os.path.exists(os.path.join(real, "partition")) else real

    def read(rel: str) -> str | None:
        try:
            with open(os.path.join(disk, rel)) as fh:
                return fh.read().strip()
        except OSError:
            return None

    size = read("size")
    return {
        "name": os.path.basename(disk),
        "model": read("device/model"),
        "rotational": read("queue/rotational") == "1",
        "logical_block_size": int(read("queue/logical_block_size") or 0) or None,
        "scheduler": read("queue/scheduler"),
        "size_bytes": int(size) * 512 if size else None,
        # a direct request larger than either limit reaches the device split (see bench/iobuf.py)
        "max_sectors_kb": _int(read("queue/max_sectors_kb")),
        "max_segments": _int(read("queue/max_segments")),
    }


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def transparent_hugepages(path: str = "/sys/kernel/mm/transparent_hugepage/enabled") -> str | None:
    """The kernel's THP mode (always, madvise, never): whether I/O buffers can sit on huge pages."""
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def capture(target: TargetSpec, io_uring: tuple[bool, str] | None = None) -> dict[str, Any]:
    env: dict[str, Any] = {
        "storekit_version": __version__,
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "ram_bytes": ram_bytes(),
        "target": target.display,
        "target_kind": target.kind,
    }
    if target.kind == "posix":
        mount = mount_of(target.root)
        env["filesystem"] = mount
        env["device"] = block_device(mount["dev"]) if mount else None
        env["memory_backed"] = bool(mount and mount["fs_type"] in MEMORY_BACKED)
        env["transparent_hugepages"] = transparent_hugepages()
    else:
        env["endpoint_url"] = mask_url(target.endpoint_url) if target.endpoint_url else None
        env["bucket"] = target.bucket
    if io_uring is not None:
        env["io_uring"] = {"available": io_uring[0], "reason": io_uring[1] or None}
    return env
