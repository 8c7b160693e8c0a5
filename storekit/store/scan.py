"""The streaming tree scanner tier planning uses: every entry below a POSIX directory with its lstat.

Streaming: memory grows with the depth times the widest directory, never with the tree (1,000,000
files stay well under 1 GiB). Order: depth first, a directory's entry before its contents, names
sorted within a directory by their bytes (as `LC_ALL=C sort`), so a subtree's entries are contiguous
and two scans of an unchanged tree agree. Links are never followed.

One directory is listed per call of a small C helper (scan_dir.c: getdents + fstatat relative to
the directory, on two threads for a big directory, sorted there) where a C compiler exists, and
with os.scandir otherwise (STOREKIT_SCAN_NATIVE=0 forces that); both give the same entries in the
same order.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import stat
from collections.abc import Callable, Iterator
from itertools import compress, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

from storekit import cbuild
from storekit.errors import storage_errors

SOURCE = Path(__file__).with_name("scan_dir.c")
ABI = 2  # SK_SCAN_ABI in scan_dir.c
CFLAGS = [*cbuild.CFLAGS, "-pthread"]
FIELDS = 5  # int64 per entry: size, mtime_ns, ctime_ns, inode, mode
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


Listing = Callable[[str, str], list[ScanEntry]]  # (directory path, rel prefix) -> its entries, sorted
_new = tuple.__new__
_mode = itemgetter(5)


def scan_tree(path: str, prefix: str = "") -> Iterator[ScanEntry]:
    """Every entry below the directory `path`, streamed (see the module doc); `path` itself is not
    yielded. NotFoundError when `path` does not exist; a subdirectory removed while scanning is
    left out (as find does), any other failure is a StorekitError naming the directory."""
    listing = lister()
    with storage_errors(path):
        top = listing(path, prefix)
    yield from _preorder(listing, path, prefix, top)


def _preorder(listing: Listing, path: str, prefix: str, top: list[ScanEntry]) -> Iterator[ScanEntry]:
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
            below = listing(sub, rel + "/")
        except OSError as exc:
            if exc.errno in _SKIP:
                continue
            with storage_errors(sub):
                raise
        stack.append((sub, rel + "/", below, _dirs(below), [0, 0]))


def _dirs(entries: list[ScanEntry]) -> list[int]:
    return list(compress(range(len(entries)), map(stat.S_ISDIR, map(_mode, entries))))


def lister() -> Listing:
    """The compiled listing where it can be built and loaded, else os.scandir's."""
    native, _why = load()
    return native.listing() if native is not None else python_listing


def python_listing(path: str, prefix: str) -> list[ScanEntry]:
    out = []
    with os.scandir(path) as it:
        for de in it:
            try:
                st = de.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed since the listing, as the compiled helper leaves it out
            row = (prefix + de.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode)
            out.append(_new(ScanEntry, row))
    out.sort(key=lambda e: os.fsencode(e.rel))
    return out


class NativeScan:
    """The loaded scan_dir library."""

    def __init__(self, lib: Any) -> None:
        self.fn = lib.sk_scan_dir

    def listing(self) -> Listing:
        """A listing function with its own buffers (grown when a directory needs more)."""
        fn, used = self.fn, ctypes.c_long()
        bufs: list[Any] = []

        def alloc(entries: int) -> None:
            recs, names = bytearray(entries * FIELDS * 8), bytearray(entries * 64)
            bufs[:] = [recs, names, (ctypes.c_char * len(recs)).from_buffer(recs),
                       (ctypes.c_char * len(names)).from_buffer(names), entries]  # fmt: skip

        alloc(4096)

        def listing(path: str, prefix: str) -> list[ScanEntry]:
            while True:
                recs, names, recs_p, names_p, cap = bufs
                n = fn(os.fsencode(path), recs_p, cap, names_p, len(names), ctypes.byref(used))
                if n != -errno.ENOBUFS:
                    break
                alloc(cap * 4)
            if n < 0:
                raise OSError(-n, os.strerror(-n), path)
            if n == 0:
                return []
            text = names[: used.value - 1].decode("utf-8", "surrogateescape").split("\0")
            nums = memoryview(recs)[: n * FIELDS * 8].cast("q").tolist()
            rels = map(prefix.__add__, text)
            rows = zip(rels, nums[0::5], nums[1::5], nums[2::5], nums[3::5], nums[4::5], strict=True)
            return list(map(_new, repeat(ScanEntry), rows))

        return listing


def disabled() -> bool:
    return os.environ.get("STOREKIT_SCAN_NATIVE", "1").strip().lower() in ("0", "no", "off", "false")


@functools.cache
def load() -> tuple[NativeScan | None, str]:
    """(the compiled helper, "") or (None, why not). Builds it when it is not cached yet."""
    if disabled():
        return None, "STOREKIT_SCAN_NATIVE=0"
    try:
        path = cbuild.library_path(SOURCE, ABI)
        cbuild.private_dir(path.parent)
        if path.exists():
            try:
                return NativeScan(_open(path)), ""
            except cbuild.Unavailable:
                path.unlink(missing_ok=True)  # damaged: build it again
        cbuild.build(SOURCE, path, CFLAGS)
        return NativeScan(_open(path)), ""
    except cbuild.Unavailable as exc:
        return None, str(exc)


def _open(path: Path) -> Any:
    # CDLL, not PyDLL: the GIL is released while a directory is listed
    try:
        lib = ctypes.CDLL(str(path))
        version = lib.sk_scan_abi()
    except (OSError, AttributeError) as exc:
        raise cbuild.Unavailable(f"cannot load {path}: {exc}") from None
    if version != ABI:
        raise cbuild.Unavailable(f"{path}: ABI {version}, expected {ABI}")
    fn = lib.sk_scan_dir
    fn.restype = ctypes.c_long
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_long,
                   ctypes.POINTER(ctypes.c_long)]  # fmt: skip
    return lib
