"""Downloads of the S3 transfer engine: concurrent ranged GETs, hashed and written in order.

The pool fetches ranges ahead (bounded by the in-flight cap); the caller's thread takes them in file
order, hashes them (xxh3-128 of exactly the bytes written), writes them sequentially to a temp file
beside the destination, and at each file's end fsyncs, checks the expected digest if one was given,
renames into place and fsyncs the directory. Every GET names the ETag the HEAD saw (If-Match), so an
object replaced during the download fails it instead of mixing two versions.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
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
from storekit.ops.s3transfer import DownloadItem, DownloadResult, S3Transfer, fadvise_dontneed


class ShortBody(ConnectionError):
    """The gateway sent fewer bytes than the range asked for (a dropped connection): retryable."""


@dataclass
class _Target:
    item: DownloadItem
    size: int
    tmp: str
    fd: int
    hasher: xxhash.xxh3_128 = field(default_factory=xxhash.xxh3_128)
    written: int = 0
    last_length: int = 0


@dataclass
class _Range:
    target: _Target
    offset: int
    length: int
    etag: str


def download_files(engine: S3Transfer, items: Sequence[DownloadItem]) -> list[DownloadResult]:
    heads = list(engine.pool.map(lambda item: _head(engine, item), items))  # sizes and ETags, concurrently
    targets: list[_Target] = []
    window: deque[tuple[_Range, cf.Future[bytes]]] = deque()
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
                    _write(rng, fut.result())
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
            for held, _ in window:
                engine.budget.release(held.length)
            for t in targets:
                _discard(t)
            raise
    for directory in sorted({os.path.dirname(os.path.abspath(r.path)) for r in results}):
        fsync_dir(directory)  # the renames are durable before we return
    return results


def _head(engine: S3Transfer, item: DownloadItem) -> tuple[int, str]:
    head = engine.call(
        f"download {engine.bucket}/{item.key}",
        lambda: engine.client.head_object(Bucket=engine.bucket, Key=item.key),
    )
    return int(head["ContentLength"]), str(head["ETag"])


def _ranges(
    engine: S3Transfer,
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
        target = _Target(item, size, tmp, fd)
        targets.append(target)
        if size == 0:
            yield _Range(target, 0, 0, etag)
        for offset in range(0, size, step):
            yield _Range(target, offset, min(step, size - offset), etag)


def _fetch(engine: S3Transfer, rng: _Range) -> bytes:
    if rng.length == 0:
        return b""
    engine.throttle(rng.length)
    key = rng.target.item.key

    def get() -> bytes:
        resp = engine.client.get_object(
            Bucket=engine.bucket,
            Key=key,
            Range=f"bytes={rng.offset}-{rng.offset + rng.length - 1}",
            IfMatch=rng.etag,
        )
        data: bytes = resp["Body"].read()
        if len(data) != rng.length:
            raise ShortBody(f"{len(data)} of {rng.length} bytes at offset {rng.offset}")
        return data

    data = engine.call(f"download {engine.bucket}/{key}", get)
    faults.point("transfer.range-fetched")
    return data


def _write(rng: _Range, data: bytes) -> None:
    target = rng.target
    target.hasher.update(data)
    view = memoryview(data)
    try:
        while view:
            n = os.write(target.fd, view)
            view = view[n:]
    except OSError as exc:
        raise _local_error(target.item.path, exc) from None
    # the range before this one: starts its writeback now (so the final fsync is short) and drops
    # whatever of it is already clean (so a recall of terabytes does not flush the page cache)
    if target.last_length:
        fadvise_dontneed(target.fd, target.written - target.last_length, target.last_length)
    target.written += len(data)
    target.last_length = len(data)


def _finish(target: _Target) -> DownloadResult:
    item = target.item
    digest = target.hasher.hexdigest()
    try:
        os.fsync(target.fd)
        fadvise_dontneed(target.fd, 0, target.size)  # all clean after the fsync: drop it
        os.close(target.fd)
        target.fd = -1
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
    return DownloadResult(item.key, item.path, target.written, digest)


def _discard(target: _Target) -> None:
    """Close and remove a temp file that will not be renamed (a no-op once it was)."""
    if target.fd >= 0:
        with contextlib.suppress(OSError):
            os.close(target.fd)
        target.fd = -1
    with contextlib.suppress(OSError):
        os.unlink(target.tmp)


def _local_error(path: str, exc: OSError) -> StorekitError:
    return storage_error(exc, path) or StorekitError(f"{path}: {exc}")
