"""The one POSIX file copy: a tier's drain and recall between mounts, and ops.copy_file between
two POSIX stores, all copy bytes with `copy_fd`.

The xxh3-128 of the bytes read is computed in the same pass, into one buffer reused for the whole
file. Each chunk's writeback is started as the next one is written (fadvise DONTNEED on dirty
pages starts it), so the disk works during the copy and the final fsync waits for the last chunk,
not the whole file. Both files' cached pages are dropped at the end: the read-back that must
follow comes from the device, and copying terabytes does not flush everyone else's page cache.
Where the copy appears (a temp sibling renamed whole, or a unit's temp tree) is the caller's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import xxhash

from storekit.digest import CHUNK, FileDigest, fadvise_dontneed
from storekit.errors import StorekitError, storage_error


def copy_fd(
    fin: int, fout: int, *, src: str, dst: str, progress: Callable[[int], None] | None = None
) -> FileDigest:
    """Copy the rest of `fin` to `fout`, fsync `fout`, drop both files' pages; the digest of the
    bytes read. A failure is a StorekitError naming `src` (reading) or `dst` (writing, fsync)."""
    hasher = xxhash.xxh3_128()
    size = 0
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with _named(src):
        while n := os.readv(fin, [buf]):
            chunk = view[:n]
            hasher.update(chunk)
            with _named(dst):
                while chunk:
                    chunk = chunk[os.write(fout, chunk) :]
            if size:
                fadvise_dontneed(fout, size - CHUNK, CHUNK)
            size += n
            if progress:
                progress(n)
        with _named(dst):
            os.fsync(fout)
        fadvise_dontneed(fin, 0, 0)
        fadvise_dontneed(fout, 0, 0)  # the read-back must come from the device
    return FileDigest(size=size, xxh3_128=hasher.hexdigest())


def copy_path(src: str, dst: str) -> FileDigest:
    """`src` copied to the new file `dst` (it must not exist: a temp the caller renames, or a path
    inside a temp tree); fsynced, pages dropped; the digest of the bytes read."""
    with _named(src):
        fin = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        with _named(dst):
            fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            return copy_fd(fin, fout, src=src, dst=dst)
        finally:
            os.close(fout)
    finally:
        os.close(fin)


@contextlib.contextmanager
def _named(where: str) -> Iterator[None]:
    """An OSError as a storekit error naming the file it is about (a write to a full or read-only
    tier names the file written, not the one read); an inner block's error is already named."""
    try:
        yield
    except OSError as exc:
        raise storage_error(exc, where) or StorekitError(f"{where}: {exc}") from None
