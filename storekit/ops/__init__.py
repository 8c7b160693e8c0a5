"""Copy, verify and delete as plain functions over stores, shared by every command.

Copy logic lives here once, above the backends (as rclone keeps it in fs/operations): a streamed
copy computes the xxh3-128 digest in the same pass, the destination appears atomically, and a
destructive step is only ever taken after the copy was verified. Between two POSIX files the bytes
go through the one local copy loop (`storekit.ops.localcopy`, which the tier's drain and recall use
too); every read-back is compared by `mismatch`, whose message every verifier prints.

The S3 transfer engine (parallel multipart uploads and ranged downloads under shared limits, with
journaled uploads) is `storekit.ops.s3transfer`; checked S3 deletes are `storekit.store.s3delete`,
POSIX trees are deleted through a tombstone (`storekit.durable.remove_tree`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import IO

import xxhash

from storekit.digest import CHUNK as CHUNK
from storekit.digest import FileDigest as FileDigest
from storekit.digest import fadvise_dontneed as fadvise_dontneed
from storekit.digest import hash_bytes as hash_bytes
from storekit.digest import hash_local as hash_local
from storekit.digest import hash_stream as hash_stream
from storekit.errors import MismatchError
from storekit.ops.localcopy import copy_fd
from storekit.store import Store


def hash_file(store: Store, rel: str) -> FileDigest:
    with store.open_read(rel) as fh:
        return hash_stream(fh.read)


def copy_file(
    src: Store,
    src_rel: str,
    dst: Store,
    dst_rel: str,
    *,
    metadata: Mapping[str, str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> FileDigest:
    """Stream `src_rel` to `dst_rel`, hashing in the same pass; the copy appears whole or not at all."""
    with src.open_read(src_rel) as fin, dst.atomic_writer(dst_rel, metadata=metadata) as fout:
        fds = _os_fds(fin, fout)
        if fds is not None:  # two POSIX files: the local copy loop (fsync, writeback, no cache left)
            fout.flush()
            where_src, where_dst = f"{src.display_url}/{src_rel}", f"{dst.display_url}/{dst_rel}"
            return copy_fd(*fds, src=where_src, dst=where_dst, progress=progress)
        h = xxhash.xxh3_128()
        size = 0
        while block := fin.read(CHUNK):
            h.update(block)
            fout.write(block)
            size += len(block)
            if progress:
                progress(len(block))
    return FileDigest(size=size, xxh3_128=h.hexdigest())


def _os_fds(fin: IO[bytes], fout: IO[bytes]) -> tuple[int, int] | None:
    """The descriptors of a reader fresh from open_read and a writer from atomic_writer, where both
    are OS files (POSIX stores); None where either is not (an S3 object)."""
    try:
        fds = fin.fileno(), fout.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return None
    if fin.tell() != os.lseek(fds[0], 0, os.SEEK_CUR):  # something is buffered ahead: not fresh
        return None
    return fds


def mismatch(where: str, expected: FileDigest, got: FileDigest) -> str | None:
    """How bytes read back at `where` differ from the digest they must have (None: they do not).
    Every copy's read-back says it in these words (ops, the tier's POSIX and S3 destinations)."""
    if got == expected:
        return None
    return (
        f"{where}: expected {expected.size} bytes xxh3-128 {expected.xxh3_128}, "
        f"found {got.size} bytes xxh3-128 {got.xxh3_128}"
    )


def check(where: str, expected: FileDigest, got: FileDigest) -> None:
    """MismatchError (exit 4) when `got` is not `expected`."""
    problem = mismatch(where, expected, got)
    if problem is not None:
        raise MismatchError(problem)


def reread(store: Store, rel: str) -> FileDigest:
    """Size and xxh3-128 of `rel` read again; a POSIX store's file leaves no page cache behind, so
    the next read-back comes from the device again."""
    with store.open_read(rel) as fh:
        digest = hash_stream(fh.read)
        try:
            fd = fh.fileno()
        except (AttributeError, OSError, ValueError):
            return digest
        fadvise_dontneed(fd)
    return digest


def verify_file(store: Store, rel: str, expected: FileDigest) -> None:
    """Re-read `rel` and compare size and digest; raise MismatchError (exit 4) on any difference."""
    check(f"{store.display_url}/{rel}", expected, reread(store, rel))


def verify_local(path: str, expected: FileDigest) -> None:
    """`verify_file` for a local path (a unit file in a tier's temp tree): read from the device, no
    page cache left; MismatchError (exit 4) on any difference."""
    check(path, expected, hash_local(path, drop_cache=True))


def copy_verified(
    src: Store,
    src_rel: str,
    dst: Store,
    dst_rel: str,
    *,
    metadata: Mapping[str, str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> FileDigest:
    """Copy, then re-read the destination and compare: the only copy a later delete may trust."""
    digest = copy_file(src, src_rel, dst, dst_rel, metadata=metadata, progress=progress)
    verify_file(dst, dst_rel, digest)
    return digest
