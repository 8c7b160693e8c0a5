"""Which mount a path is on (file system type, source, options), read from /proc/self/mountinfo.

Used where behaviour depends on the file system: a store's probed capabilities, and the environment a
benchmark result was measured in.
"""

from __future__ import annotations

import os
from typing import Any


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> dict[str, Any] | None:
    """The mount holding `path` (longest mount point prefix of its real path)."""
    real = os.path.realpath(path)
    best: dict[str, Any] | None = None
    try:
        with open(mountinfo) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 6 or len(rest) < 2:
            continue
        point = _unescape(fields[4])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best["mount_point"])):
            best = {
                "mount_point": point,
                "fs_type": rest[0],
                "source": _unescape(rest[1]),
                "mount_options": fields[5],
                "super_options": rest[2] if len(rest) > 2 else "",
                "dev": fields[2],
            }
    return best
