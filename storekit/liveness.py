"""Is the process a record names still running? One answer for leases, job work dirs and bench runs.

A pid alone proves little: after a wrap it may name another process, and after a reboot every pid
does. Records that must tell a live holder from a dead one keep, beside the pid, the process's start
time (clock ticks after boot, /proc/PID/stat field 22) and may keep the boot id. A process on this
host counts as gone only when one of them proves it; what cannot be read gives the benefit of the doubt.
"""

from __future__ import annotations

import os

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str | None:
    """This boot's id (a reboot changes it); None where the kernel does not say."""
    try:
        with open(BOOT_ID) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def pid_namespace() -> str | None:
    """This process's PID namespace (the inode of /proc/self/ns/pid): a pid means something only
    inside the namespace it was read in (a container on the same host has its own pid 1)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return None


def process_start(pid: int) -> str | None:
    """When the process started, in clock ticks after boot (tells a reused pid from the one recorded);
    None when it is gone or /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()  # the name in (...) may hold spaces
        return str(int(fields[19]))
    except (OSError, IndexError, ValueError):
        return None


def process_alive(pid: int, start: str | None = None, *, boot: str | None = None) -> bool:
    """False only when the process a record names is provably gone: the machine booted since (`boot`
    differs from this boot's id), no process has `pid`, or the pid now belongs to a process started at
    another time than `start`. Unknown `start` or `boot` prove nothing; another user's process is alive."""
    if pid <= 0:
        return False
    now_boot = boot_id() if boot else None
    if boot and now_boot and boot != now_boot:
        return False  # every process of that boot is gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    return start is None or process_start(pid) in (start, None)
