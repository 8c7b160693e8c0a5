"""Copy, verify and delete as plain functions over stores, shared by every command.

Copy logic lives here once, above the backends (as rclone keeps it in fs/operations): a streamed
copy computes the xxh3-128 digest in the same pass, the destination appears atomically, and a
destructive step is only ever taken after the copy was verified.

The S3 transfer engine (parallel multipart uploads and ranged downloads under shared limits, with
journaled uploads) is `storekit.ops.s3transfer`; checked S3 deletes are `storekit.store.s3delete`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import xxhash

from storekit.digest import CHUNK as CHUNK
from storekit.digest import FileDigest as FileDigest
from storekit.digest import fadvise_dontneed as fadvise_dontneed
from storekit.digest import hash_bytes as hash_bytes
from storekit.digest import hash_local as hash_local
from storekit.digest import hash_stream as hash_stream
from storekit.errors import MismatchError
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
    h = xxhash.xxh3_128()
    size = 0
    with src.open_read(src_rel) as fin, dst.atomic_writer(dst_rel, metadata=metadata) as fout:
        while block := fin.read(CHUNK):
            h.update(block)
            fout.write(block)
            size += len(block)
            if progress:
                progress(len(block))
    return FileDigest(size=size, xxh3_128=h.hexdigest())


def verify_file(store: Store, rel: str, expected: FileDigest) -> None:
    """Re-read `rel` and compare size and digest; raise MismatchError (exit 4) on any difference."""
    got = hash_file(store, rel)
    if got != expected:
        raise MismatchError(
            f"{store.display_url}/{rel}: expected {expected.size} bytes xxh3-128 {expected.xxh3_128}, "
            f"found {got.size} bytes xxh3-128 {got.xxh3_128}"
        )


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
