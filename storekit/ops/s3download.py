"""Downloads of the S3 transfer engine: concurrent ranged GETs, hashed and written in order.

The pool fetches ranges ahead (bounded by the in-flight cap), each into a reused page-aligned buffer,
and writes it at its offset in a temp file beside the destination with O_DIRECT where the filesystem
takes it: the bytes go to the device without a page-cache copy (most of a recall's client CPU) and
without waiting for the kernel's writeback (here ~330 MB/s buffered + fsync against 1.7 GB/s direct),
so the fsync at the file's end is short. The tail of a file that is not a whole block, and every
write where O_DIRECT is refused, go through a buffered descriptor. The caller's thread takes the
ranges in file order and hashes them (xxh3-128 of exactly the bytes written); at each file's end the
file is fsynced, checked against the expected digest if one was given, renamed into place, and the
directory fsynced. Every GET names the ETag the HEAD saw (If-Match), so an object replaced during the
download fails it instead of mixing two versions.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import errno
import mmap
import os
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import xxhash

from storekit import faults
from storekit.durable import TMP_MARK, fsync_dir
from storekit.errors import MismatchError, StorekitError, storage_error
from storekit.ops.s3engine import DownloadItem, DownloadResult, S3Engine, fadvise_dontneed

# O_DIRECT needs block-aligned offsets, lengths and memory; a page covers every usual block size
ALIGN = mmap.PAGESIZE
# the body is read in pieces of this size: each piece is copied once more, while still in the cache
PIECE = 1024 * 1024


class ShortBody(ConnectionError):
    """The gateway sent fewer bytes than the range asked for (a dropped connection): retryable."""


@dataclass
class _Target:
    item: DownloadItem
    size: int
    tmp: str
    fd: int  # buffered: tails, and everything where O_DIRECT is refused
    direct: int = -1  # the same file opened O_DIRECT, or -1
    hasher: xxhash.xxh3_128 = field(default_factory=xxhash.xxh3_128)
    hashed: int = 0


@dataclass
class _Range:
    target: _Target
    offset: int
    length: int
    etag: str


def download_files(engine: S3Engine, items: Sequence[DownloadItem]) -> list[DownloadResult]:
    heads = list(engine.pool.map(lambda item: _head(engine, item), items))  # sizes and ETags, concurrently
    targets: list[_Target] = []
    window: deque[tuple[_Range, cf.Future[mmap.mmap]]] = deque()
    finishing: list[cf.Future[DownloadResult]] = []
    # fsync + verify + rename of one file overlaps the download of the next
    with cf.ThreadPoolExecutor(2, thread_name_prefix="storekit-fsync") as finisher:
        try:
            planned = _ranges(engine, items, heads, targets)
            pending = next(planned, None)
            while pending is not None or window:
                while pending is not None:
                    if window:
                        if not engine.budget.try_acquire(pending.length):
                            break
                    else:  # nothing held by us: a blocking wait cannot deadlock
                        engine.budget.acquire(pending.length)
                    window.append((pending, engine.pool.submit(_fetch, engine, pending)))
                    pending = next(planned, None)
                rng, fut = window.popleft()
                try:
                    buf = fut.result()
                    try:
                        _hash(rng, buf)
                    finally:
                        engine.range_buffers.give(buf)
                finally:
                    engine.budget.release(rng.length)
                if rng.offset + rng.length == rng.target.size:
                    finishing.append(finisher.submit(_finish, rng.target))
            results = [f.result() for f in finishing]
        except BaseException:
            for _, fut in window:
                fut.cancel()
            started: list[cf.Future[Any]] = [fut for _, fut in window]
            cf.wait(started + list(finishing))
            for held, fut in window:
                engine.budget.release(held.length)
                if not fut.cancelled() and fut.exception() is None:
                    engine.range_buffers.give(fut.result())
            for t in targets:
                _discard(t)
            raise
    for directory in sorted({os.path.dirname(os.path.abspath(r.path)) for r in results}):
        fsync_dir(directory)  # the renames are durable before we return
    return results


def _head(engine: S3Engine, item: DownloadItem) -> tuple[int, str]:
    head = engine.call(
        f"download {engine.bucket}/{item.key}",
        lambda: engine.client.head_object(Bucket=engine.bucket, Key=item.key),
    )
    return int(head["ContentLength"]), str(head["ETag"])


def _ranges(
    engine: S3Engine,
    items: Sequence[DownloadItem],
    heads: Sequence[tuple[int, str]],
    targets: list[_Target],
) -> Iterator[_Range]:
    step = engine.config.range_size
    for item, (size, etag) in zip(items, heads, strict=True):
        directory, name = os.path.split(os.path.abspath(item.path))
        tmp = os.path.join(directory, f".{name}{TMP_MARK}{uuid.uuid4().hex[:12]}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise _local_error(item.path, exc) from None
        target = _Target(item, size, tmp, fd, _open_direct(tmp))
        targets.append(target)
        if size == 0:
            yield _Range(target, 0, 0, etag)
        for offset in range(0, size, step):
            yield _Range(target, offset, min(step, size - offset), etag)


def _open_direct(path: str) -> int:
    """`path` opened again with O_DIRECT, or -1 where the filesystem refuses it (tmpfs, some FUSE)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return -1
    try:
        return os.open(path, os.O_WRONLY | os.O_CLOEXEC | flag)
    except OSError:
        return -1


def _fetch(engine: S3Engine, rng: _Range) -> mmap.mmap:
    """The range's bytes in one of the engine's aligned buffers, already written to the temp file."""
    buf = engine.range_buffers.take(engine.config.range_size)
    try:
        if rng.length:
            engine.throttle(rng.length)
            key = rng.target.item.key
            engine.call(f"download {engine.bucket}/{key}", lambda: _get_into(engine, rng, buf))
            _write(rng, buf)
            faults.point("transfer.range-fetched")
    except BaseException:
        engine.range_buffers.give(buf)
        raise
    return buf


def _get_into(engine: S3Engine, rng: _Range, buf: mmap.mmap) -> None:
    resp = engine.client.get_object(
        Bucket=engine.bucket,
        Key=rng.target.item.key,
        Range=f"bytes={rng.offset}-{rng.offset + rng.length - 1}",
        IfMatch=rng.etag,
    )
    body, got = resp["Body"], 0
    with memoryview(buf) as view:
        try:
            while got < rng.length:
                n = body.readinto(view[got : min(got + PIECE, rng.length)])
                if not n:
                    break
                got += n
        except Exception as exc:
            if type(exc).__name__ != "IncompleteReadError":
                raise
    if got != rng.length:
        raise ShortBody(f"{got} of {rng.length} bytes at offset {rng.offset}")


def _write(rng: _Range, buf: mmap.mmap) -> None:
    """The whole blocks of the range go O_DIRECT where the file takes it, the rest buffered."""
    target = rng.target
    direct = 0
    if target.direct >= 0 and rng.offset % ALIGN == 0:
        direct = rng.length - rng.length % ALIGN
    with memoryview(buf) as view:
        try:
            if direct:
                try:
                    _pwrite_all(target.direct, view[:direct], rng.offset)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    direct = 0  # an alignment this filesystem does not take: buffered, like the rest
            if direct < rng.length:
                _pwrite_all(target.fd, view[direct : rng.length], rng.offset + direct)
                # start its writeback now, so the file's final fsync waits for little
                fadvise_dontneed(target.fd, rng.offset + direct, rng.length - direct)
        except OSError as exc:
            raise _local_error(target.item.path, exc) from None


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _hash(rng: _Range, buf: mmap.mmap) -> None:
    """In file order: the digest is of the bytes written, in the order they sit in the file."""
    target = rng.target
    if target.hashed != rng.offset:
        raise AssertionError(f"{target.item.key}: range at {rng.offset} hashed after {target.hashed}")
    with memoryview(buf) as view:
        target.hasher.update(view[: rng.length])
    target.hashed += rng.length


def _finish(target: _Target) -> DownloadResult:
    item = target.item
    digest = target.hasher.hexdigest()
    try:
        os.fsync(target.fd)
        fadvise_dontneed(target.fd, 0, target.size)  # all clean after the fsync: drop it
        _close(target)
        if item.expected_xxh3_128 is not None and digest != item.expected_xxh3_128:
            raise MismatchError(
                f"s3 object {item.key}: expected xxh3-128 {item.expected_xxh3_128}, downloaded {digest}"
            )
        os.replace(target.tmp, item.path)
    except OSError as exc:
        _discard(target)
        raise _local_error(item.path, exc) from None
    except BaseException:
        _discard(target)
        raise
    return DownloadResult(item.key, item.path, target.hashed, digest)


def _discard(target: _Target) -> None:
    """Close and remove a temp file that will not be renamed (a no-op once it was)."""
    with contextlib.suppress(OSError):
        _close(target)
    with contextlib.suppress(OSError):
        os.unlink(target.tmp)


def _close(target: _Target) -> None:
    for fd in (target.fd, target.direct):
        if fd >= 0:
            os.close(fd)
    target.fd = target.direct = -1


def _local_error(path: str, exc: OSError) -> StorekitError:
    return storage_error(exc, path) or StorekitError(f"{path}: {exc}")
