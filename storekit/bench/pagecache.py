"""Keeping the page cache out of the numbers: drop it, evict our files, and measure what is left.

`drop_caches` needs root (and a writable /proc/sys); `evict` (posix_fadvise DONTNEED after the data is
on disk) works for anyone on their own files; `resident_fraction` (mincore) tells how much of a file is
in memory right before it is read, so a filesystem that ignores O_DIRECT or eviction is caught.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
from collections.abc import Generator, Iterable

import numpy as np

DROP_CACHES = "/proc/sys/vm/drop_caches"


def drop_caches() -> tuple[bool, str]:
    """Write back dirty pages and drop page cache, dentries and inodes. (done, why not)."""
    try:
        os.sync()
        with open(DROP_CACHES, "w") as fh:
            fh.write("3\n")
    except PermissionError:
        return False, "not permitted (needs root)"
    except OSError as exc:
        return False, f"not possible here ({exc.strerror or exc})"
    return True, ""


def _each_open(paths: Iterable[str]) -> Generator[int, None, None]:
    """A read-only descriptor of each path that opens (the others are skipped), closed after its turn."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            yield fd
        finally:
            os.close(fd)


def evict(paths: Iterable[str]) -> int:
    """Ask the kernel to drop our files' clean pages; returns how many files were evicted."""
    done = 0
    for fd in _each_open(paths):
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            done += 1
        except OSError:
            pass
    return done


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return libc


def resident_fraction(paths: Iterable[str]) -> float | None:
    """Fraction of the files' pages in the page cache (None if it cannot be measured)."""
    libc = _libc()
    resident = total = 0
    with contextlib.closing(_each_open(paths)) as fds:
        for fd in fds:
            size = os.fstat(fd).st_size
            if size == 0:
                continue
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                return None
            try:
                pages = -(-size // mmap.PAGESIZE)
                vec = (ctypes.c_ubyte * pages)()
                if libc.mincore(addr, size, vec) != 0:
                    return None
                resident += int((np.frombuffer(bytes(vec), dtype=np.uint8) & 1).sum())
                total += pages
            finally:
                libc.munmap(addr, size)
    return resident / total if total else None
