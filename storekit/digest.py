"""Size + xxh3-128 of a stream: the one digest loop (copies, manifests, checkpoint stages, tiering).

Only the standard library and xxhash: a training script's `checkpoint.commit` imports it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass

import xxhash

CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class FileDigest:
    size: int
    xxh3_128: str  # lowercase hex


def hash_stream(read: Callable[[int], bytes], chunk: int = CHUNK) -> FileDigest:
    h = xxhash.xxh3_128()
    size = 0
    while block := read(chunk):
        h.update(block)
        size += len(block)
    return FileDigest(size=size, xxh3_128=h.hexdigest())


def hash_bytes(data: bytes) -> FileDigest:
    return FileDigest(size=len(data), xxh3_128=xxhash.xxh3_128_hexdigest(data))


def fadvise_dontneed(fd: int, offset: int = 0, length: int = 0) -> None:
    """Archiving terabytes must not flush everyone else's page cache."""
    with contextlib.suppress(OSError, AttributeError):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def hash_local(path: str | os.PathLike[str], *, fsync: bool = False, drop_cache: bool = False) -> FileDigest:
    """Size and xxh3-128 of a local file. `fsync`: make what a writer left durable while it is open
    (a staged checkpoint); `drop_cache`: leave no page cache behind, so that the next read of a copy
    comes from the device again (tier read-back)."""
    with open(path, "rb") as fh:
        digest = hash_stream(fh.read)
        if fsync:
            os.fsync(fh.fileno())
        if drop_cache:
            fadvise_dontneed(fh.fileno())
    return digest
