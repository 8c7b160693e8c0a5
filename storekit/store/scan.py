"""The streaming tree scanner tier planning uses: every entry below a POSIX directory with its lstat.

Streaming: memory grows with the depth times the widest directory, never with the tree (1,000,000
files stay well under 1 GiB). Order: depth first, a directory's entry before its contents, names
sorted within a directory by their bytes (as `LC_ALL=C sort`), so a subtree's entries are contiguous
and two scans of an unchanged tree agree. Links are never followed.

Where a C compiler exists, a small C walker (scan_dir.c) lists and lstats (getdents + fstatat
relative to the directory, as find) on its own thread and hands over batches of 4,096 entries while
this thread makes their objects: the system calls and the Python side overlap instead of adding up.
It reads at most two batches ahead, so a change made during the scan may or may not be seen, as with
find. Without a compiler (or STOREKIT_SCAN_NATIVE=0) os.scandir lists one directory at a time; both
give the same entries in the same order.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import stat
from collections.abc import Iterator
from itertools import compress, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

from storekit.errors import storage_errors

SOURCE = Path(__file__).with_name("scan_dir.c")
ABI = 3  # SK_SCAN_ABI in scan_dir.c
EXTRA_CFLAGS = ["-pthread"]
FIELDS = 5  # int64 columns: size, mtime_ns, ctime_ns, inode, mode
BATCH = 4096  # entries per batch the walker hands over
NAMES_BYTES = 1 << 20  # bytes of names per batch (a batch ends early when they fill up)
_SKIP = (errno.ENOENT, errno.ENOTDIR)  # removed or replaced since its parent was listed


class ScanEntry(NamedTuple):
    rel: str  # prefix + the path below the scanned directory, '/'-separated
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    mode: int  # the full st_mode (type and permission bits)

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def is_link(self) -> bool:
        return stat.S_ISLNK(self.mode)


_new = tuple.__new__
_mode = itemgetter(5)


def scan_tree(path: str, prefix: str = "") -> Iterator[ScanEntry]:
    """Every entry below the directory `path`, streamed (see the module doc); `path` itself is not
    yielded. NotFoundError when `path` does not exist; a subdirectory removed while scanning is
    left out (as find does), any other failure is a StorekitError naming the directory."""
    native, _why = load()
    if native is not None:
        yield from native.walk(path, prefix)
        return
    with storage_errors(path):
        top = python_listing(path, prefix)
    yield from _preorder(path, prefix, top)


def _preorder(path: str, prefix: str, top: list[ScanEntry]) -> Iterator[ScanEntry]:
    # each level: (its directory path, its prefix, its entries, positions of its subdirectories, next)
    stack = [(path, prefix, top, _dirs(top), [0, 0])]
    while stack:
        here, pre, entries, dirs, pos = stack[-1]
        start, d = pos
        if d == len(dirs):
            yield from entries[start:]
            stack.pop()
            continue
        i = dirs[d]
        pos[0], pos[1] = i + 1, d + 1
        yield from entries[start : i + 1]  # up to and including the subdirectory, then its tree
        rel = entries[i].rel
        sub = f"{here}/{rel[len(pre) :]}"
        try:
            below = python_listing(sub, rel + "/")
        except OSError as exc:
            if exc.errno in _SKIP:
                continue
            with storage_errors(sub):
                raise
        stack.append((sub, rel + "/", below, _dirs(below), [0, 0]))


def _dirs(entries: list[ScanEntry]) -> list[int]:
    return list(compress(range(len(entries)), map(stat.S_ISDIR, map(_mode, entries))))


def python_listing(path: str, prefix: str) -> list[ScanEntry]:
    """One directory's entries, sorted (the walk without a C compiler)."""
    out = []
    with os.scandir(path) as it:
        for de in it:
            try:
                st = de.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed since the listing, as the compiled walker leaves it out
            row = (prefix + de.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode)
            out.append(_new(ScanEntry, row))
    out.sort(key=lambda e: os.fsencode(e.rel))
    return out


class NativeScan:
    """The loaded scan_dir library: a walker thread lists and stats while this thread makes objects."""

    batch = BATCH  # entries per batch handed over (tests lower it)
    threaded = True  # False: nothing is listed before the caller asks for it (tests)

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def walk(self, path: str, prefix: str) -> Iterator[ScanEntry]:
        lib, cap = self.lib, self.batch
        pre = os.fsencode(prefix)
        names_cap = NAMES_BYTES + 4096 + len(pre)  # at least one entry of the deepest allowed path
        cols, names, used = bytearray(cap * FIELDS * 8), bytearray(names_cap), ctypes.c_long()
        cols_p = (ctypes.c_char * len(cols)).from_buffer(cols)
        names_p = (ctypes.c_char * len(names)).from_buffer(names)
        view = memoryview(cols).cast("q")
        handle = lib.sk_walk_open(os.fsencode(path), pre, cap, names_cap, int(self.threaded))
        if not handle:
            raise MemoryError(f"cannot start the scan of {path}")
        try:
            while (n := lib.sk_walk_next(handle, cols_p, names_p, ctypes.byref(used))) > 0:
                rels = names[: used.value - 1].decode("utf-8", "surrogateescape").split("\0")
                fields = [view[f * cap : f * cap + n].tolist() for f in range(FIELDS)]
                yield from map(_new, repeat(ScanEntry), zip(rels, *fields, strict=True))
            if n < 0:
                where = os.fsdecode(lib.sk_walk_error_path(handle) or os.fsencode(path))
                with storage_errors(where):
                    raise OSError(-n, os.strerror(-n), where)
        finally:
            lib.sk_walk_close(handle)


@functools.cache
def load() -> tuple[NativeScan | None, str]:
    """(the compiled helper, "") or (None, why not). Builds it when it is not cached yet."""
    from storekit import cbuild  # compiler plumbing (subprocess, hashlib, platform): not at import

    flags = [*cbuild.CFLAGS, *EXTRA_CFLAGS]
    return cbuild.load(
        SOURCE, ABI, flags, lambda path: NativeScan(_open(path)), switch="STOREKIT_SCAN_NATIVE"
    )


def _open(path: Path) -> Any:
    from storekit import cbuild

    lib = cbuild.open_library(path, "sk_scan_abi", ABI, keep_gil=False)  # released while a tree is walked
    lib.sk_walk_open.restype = ctypes.c_void_p
    lib.sk_walk_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_long, ctypes.c_long, ctypes.c_int]
    lib.sk_walk_next.restype = ctypes.c_long
    lib.sk_walk_next.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_long),
    ]
    lib.sk_walk_error_path.restype = ctypes.c_char_p
    lib.sk_walk_error_path.argtypes = [ctypes.c_void_p]
    lib.sk_walk_live.restype = ctypes.c_long
    lib.sk_walk_close.restype = None
    lib.sk_walk_close.argtypes = [ctypes.c_void_p]
    return lib
