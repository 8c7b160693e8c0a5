"""Uploads of the S3 transfer engine: one reading thread, parts sent by the shared pool.

The caller's thread hashes each file (xxh3-128) in order, part by part, and hands each part to the
pool; it blocks when the in-flight cap is reached. A part of 4 MiB or more is sent straight from the
file's pages (storekit.ops.s3parts: mapped, not copied into a buffer) and dropped from the page cache
once sent; a smaller one is read into memory. Parts leave after they were hashed, so the file's size
and mtime are checked again before the upload is completed. A file up to one part goes in one PUT
whose metadata carries its digest (known before the PUT); a larger one is a multipart upload whose
metadata cannot carry it (the digest is known only after the last part is read). Every multipart
upload is journaled before its first part is sent.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import xxhash

from storekit import faults
from storekit.errors import StorekitError, s3_error_code, storage_error
from storekit.ops.journal import UploadEntry
from storekit.ops.s3engine import (
    DIGEST_META_KEY,
    GONE_UPLOAD_CODES,
    NoSuchUpload,
    S3Engine,
    UploadItem,
    UploadResult,
    fadvise_dontneed,
)
from storekit.ops.s3parts import MappedPart

MAP_MIN = 4 * 1024 * 1024  # smaller parts are read: a map costs more than copying them


def upload_files(
    engine: S3Engine, items: Sequence[UploadItem], on_done: Callable[[UploadResult], None] | None = None
) -> list[UploadResult]:
    """Upload every item; waits for all started work, then raises the first failure (if any).
    `on_done(result)` is called as each file's upload completes (from a pool thread), e.g. to start
    its read-back while the next files are still going up; its failure fails the call."""
    stop = threading.Event()
    futures: list[cf.Future[UploadResult]] = []
    failed: list[BaseException] = []
    called = threading.Condition()
    ncalled = [0]  # callbacks finished: a future's waiters wake before its callbacks have run

    def done(fut: cf.Future[UploadResult]) -> None:
        try:
            if on_done is not None and not fut.cancelled() and fut.exception() is None:
                on_done(fut.result())
        except BaseException as exc:
            failed.append(exc)
            stop.set()
        finally:
            with called:
                ncalled[0] += 1
                called.notify_all()

    try:
        for item in items:
            if stop.is_set():
                break
            futures.append(_start(engine, item, stop))
            futures[-1].add_done_callback(done)
    finally:
        cf.wait(futures)
        with called:
            called.wait_for(lambda: ncalled[0] == len(futures))
    for fut in futures:
        exc = fut.exception()
        if exc is not None:
            raise exc
    if failed:
        raise failed[0]
    return [fut.result() for fut in futures]


def _start(engine: S3Engine, item: UploadItem, stop: threading.Event) -> cf.Future[UploadResult]:
    try:
        fd = os.open(item.path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        stop.set()
        return _failed(_local_error(item.path, exc))
    try:
        st = os.fstat(fd)
        if st.st_size <= engine.part_size(st.st_size):
            return _single_put(engine, item, fd, st, stop)
        upload = _Multipart(engine, item, st, stop)
        upload.run(fd)
        return upload.future
    finally:
        os.close(fd)


def _single_put(
    engine: S3Engine, item: UploadItem, fd: int, st: os.stat_result, stop: threading.Event
) -> cf.Future[UploadResult]:
    size = st.st_size
    engine.budget.acquire(size)
    data: bytes | MappedPart = b""
    try:
        data = _read_part(item.path, fd, 0, size)
        hasher = xxhash.xxh3_128()
        _hash_part(hasher, item.path, fd, 0, data)
        if not isinstance(data, MappedPart):
            fadvise_dontneed(fd, 0, size)
        _check_unchanged(item.path, fd, st)
        own = _SharedFd(fd, item.path) if isinstance(data, MappedPart) else None
    except BaseException as exc:
        engine.budget.release(size)
        _part_sent(data, None, 0)
        stop.set()
        if not isinstance(exc, Exception):
            raise
        return _failed(exc)
    digest = hasher.hexdigest()
    meta = _object_metadata({**item.metadata, DIGEST_META_KEY: digest})

    def send() -> UploadResult:
        try:
            engine.throttle(size)
            engine.call(
                f"upload {engine.bucket}/{item.key}",
                lambda: engine.client.put_object(
                    Bucket=engine.bucket, Key=item.key, Body=_body(data), Metadata=meta
                ),
            )
            if own is not None:  # the bytes went from the pages, after the hash: still the same file?
                _check_unchanged(item.path, own.fd, st)
        except BaseException:
            stop.set()
            raise
        finally:
            engine.budget.release(size)
            _part_sent(data, own, 0)
            if own is not None:
                own.release()
        return UploadResult(item.key, size, digest, parts=0, reused_parts=0, digest_in_metadata=True)

    return engine.pool.submit(send)


class _Multipart:
    """One file's multipart upload: parts read here, sent by the pool, completed by whoever ends last."""

    def __init__(self, engine: S3Engine, item: UploadItem, st: os.stat_result, stop: threading.Event):
        self.engine, self.item, self.st, self.stop = engine, item, st, stop
        self.size = st.st_size
        self.part_size = engine.part_size(self.size)
        self.nparts = -(-self.size // self.part_size)
        self.future: cf.Future[UploadResult] = cf.Future()
        self.etags: dict[int, str] = {}
        self.reused = 0
        self.digest: str | None = None
        self.upload_id = ""
        self._lock = threading.Lock()
        self._finishing = False
        self._error: BaseException | None = None
        self._settled = False

    @property
    def what(self) -> str:
        return f"upload {self.engine.bucket}/{self.item.key}"

    def run(self, fd: int) -> None:
        # parts are dropped from the cache after they are sent; its references are this upload's work
        # still running (run() until every part is handed out, each part being sent, the complete):
        # a failure is settled (abort, then the future) once the last one is released
        self.fd = _SharedFd(fd, self.item.path, on_closed=self._settle)
        try:
            reusable = self._begin()
            hasher = xxhash.xxh3_128()
            for number in range(1, self.nparts + 1):
                if self.stop.is_set() or self.future.done():
                    raise _Stopped()
                offset = (number - 1) * self.part_size
                length = min(self.part_size, self.size - offset)
                self.engine.budget.acquire(length)
                try:
                    data = _read_part(self.item.path, fd, offset, length)
                except BaseException:
                    self.engine.budget.release(length)
                    raise
                _hash_part(hasher, self.item.path, fd, offset, data)
                if not isinstance(data, MappedPart):
                    fadvise_dontneed(fd, offset, length)
                known = reusable.get(number)
                if known is not None and known[0] == length and _md5(data) == known[1]:
                    # a part of the journaled upload found intact: the part's MD5 decides only
                    # whether to send it again, never what the file's digest is
                    self.engine.budget.release(length)
                    _part_sent(data, self.fd, offset)
                    self.reused += 1
                    self._part_done(number, f'"{known[1]}"')
                    continue
                self.fd.acquire()
                self.engine.pool.submit(self._send, number, offset, data)
            _check_unchanged(self.item.path, fd, self.st)
            with self._lock:
                self.digest = hasher.hexdigest()
            self._maybe_complete()
        except _Stopped:
            self._fail(StorekitError(f"{self.what}: stopped after another file failed"))
        except BaseException as exc:
            self._fail(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self.fd.release()

    def _begin(self) -> dict[int, tuple[int, str]]:
        """Resume the journaled upload of this key if the source is unchanged, else start one."""
        engine, journal = self.engine, self.engine.journal
        fingerprint = (self.size, self.st.st_mtime_ns, self.st.st_ino)
        old = _journaled(engine, self.item.key)
        same = old is not None and (old.size, old.mtime_ns, old.inode, old.part_size) == (
            *fingerprint,
            self.part_size,
        )
        if old is not None and old.upload_id is not None and same:
            try:
                parts = _list_parts(engine, self.item.key, old.upload_id)
            except NoSuchUpload:
                parts = None
            if parts is not None:
                self.upload_id = old.upload_id
                return parts
        if old is not None:  # the source changed, or the create's answer was never recorded
            for stale in engine.journaled_upload_ids(old):
                with contextlib.suppress(NoSuchUpload):
                    engine.abort(self.item.key, stale)
        entry = UploadEntry(
            bucket=engine.bucket,
            key=self.item.key,
            upload_id=None,
            part_size=self.part_size,
            size=self.size,
            mtime_ns=self.st.st_mtime_ns,
            inode=self.st.st_ino,
            started=time.time(),
        )
        if journal is not None:
            journal.record(entry)  # the intent first: a lost create answer is still found by key
        meta = _object_metadata(self.item.metadata)
        created = engine.call(
            self.what,
            lambda: engine.client.create_multipart_upload(
                Bucket=engine.bucket, Key=self.item.key, Metadata=meta
            ),
        )
        self.upload_id = created["UploadId"]
        faults.point("transfer.upload-created")
        if journal is not None:
            journal.record(replace(entry, upload_id=self.upload_id))
        faults.point("transfer.upload-journaled")
        return {}

    def _send(self, number: int, offset: int, data: bytes | MappedPart) -> None:
        engine = self.engine
        try:
            if self._error is not None or self.future.done():
                return
            faults.point("transfer.part-sending")
            engine.throttle(len(data))
            resp = engine.call(
                f"{self.what} part {number}",
                lambda: engine.client.upload_part(
                    Bucket=engine.bucket,
                    Key=self.item.key,
                    UploadId=self.upload_id,
                    PartNumber=number,
                    Body=_body(data),
                ),
            )
            faults.point("transfer.part-sent")
            self._part_done(number, resp["ETag"])
        except BaseException as exc:
            self._fail(exc)
        finally:
            engine.budget.release(len(data))
            _part_sent(data, self.fd, offset)
            self.fd.release()

    def _part_done(self, number: int, etag: str) -> None:
        with self._lock:
            self.etags[number] = etag
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        with self._lock:
            ready = self.digest is not None and len(self.etags) == self.nparts and not self._finishing
            ready = ready and self._error is None
            self._finishing = self._finishing or ready
        if ready:
            self.fd.acquire()  # _complete stats the file
            self.engine.pool.submit(self._complete)

    def _complete(self) -> None:
        engine = self.engine
        parts = [{"PartNumber": n, "ETag": self.etags[n]} for n in sorted(self.etags)]
        try:
            # parts went from the file's pages after they were hashed: was it written meanwhile?
            _check_unchanged(self.item.path, self.fd.fd, self.st)
            faults.point("transfer.before-complete")
            try:
                engine.call(
                    self.what,
                    lambda: engine.client.complete_multipart_upload(
                        Bucket=engine.bucket,
                        Key=self.item.key,
                        UploadId=self.upload_id,
                        MultipartUpload={"Parts": parts},
                    ),
                )
            except Exception as exc:
                # a retried complete whose first answer was lost finds its upload already gone
                if s3_error_code(exc) not in GONE_UPLOAD_CODES or not self._object_is_there():
                    raise
            faults.point("transfer.completed")
            if engine.journal is not None:
                engine.journal.forget(engine.bucket, self.item.key)
            assert self.digest is not None
            self.future.set_result(
                UploadResult(
                    self.item.key,
                    self.size,
                    self.digest,
                    parts=self.nparts,
                    reused_parts=self.reused,
                    digest_in_metadata=False,
                )
            )
        except BaseException as exc:
            self._fail(exc)
        finally:
            self.fd.release()

    def _object_is_there(self) -> bool:
        head = self.engine.call(
            self.what, lambda: self.engine.client.head_object(Bucket=self.engine.bucket, Key=self.item.key)
        )
        return int(head["ContentLength"]) == self.size and str(head["ETag"]).endswith(f'-{self.nparts}"')

    def _fail(self, exc: BaseException) -> None:
        self.stop.set()
        with self._lock:
            if self._error is None and not self.future.done():
                self._error = exc
        faults.point("transfer.upload-failed")
        self._settle()

    def _settle(self) -> None:
        """A failed upload is aborted, and its failure reported, only once none of its parts is still
        going out: a part the gateway takes after the abort brings the upload back (RGW lists it again,
        with its parts, and nothing would ever abort it), and the caller must not see the failure
        while a part of it is still being sent."""
        with self._lock:
            if self._error is None or self.fd.in_use or self._settled or self.future.done():
                return
            self._settled = True
            exc = self._error
        if self.engine.journal is None and self.upload_id:
            # nothing would ever find these parts again: abort now (with a journal, a rerun resumes)
            with contextlib.suppress(Exception):
                self.engine.abort(self.item.key, self.upload_id)
        self.future.set_exception(exc)


class _Stopped(Exception):
    pass


def _journaled(engine: S3Engine, key: str) -> UploadEntry | None:
    if engine.journal is None:
        return None
    for entry in engine.journal.entries():
        if entry.bucket == engine.bucket and entry.key == key:
            return entry
    return None


def _list_parts(engine: S3Engine, key: str, upload_id: str) -> dict[int, tuple[int, str]]:
    parts: dict[int, tuple[int, str]] = {}
    marker = 0
    while True:
        page: dict[str, Any] = engine.call_on_upload(
            f"list parts of {engine.bucket}/{key}",
            key,
            lambda m=marker: engine.client.list_parts(  # type: ignore[misc]
                Bucket=engine.bucket, Key=key, UploadId=upload_id, PartNumberMarker=m
            ),
        )
        for p in page.get("Parts", []):
            parts[int(p["PartNumber"])] = (int(p["Size"]), str(p["ETag"]).strip('"'))
        if not page.get("IsTruncated"):
            return parts
        marker = int(page["NextPartNumberMarker"])


def _object_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    from storekit.store import encode_s3_metadata

    return encode_s3_metadata(metadata)


def _read_part(path: str, fd: int, offset: int, length: int) -> bytes | MappedPart:
    """A part of MAP_MIN bytes or more is mapped, not copied (storekit.ops.s3parts); a smaller one is
    read into a bytes object of its own size."""
    if length < MAP_MIN:
        return _pread_exact(path, fd, offset, length)
    try:
        return MappedPart(fd, offset, length)
    except (OSError, ValueError) as exc:  # ValueError: the file shrank below the part since its stat
        raise StorekitError(f"{path}: cannot map bytes {offset}-{offset + length}: {exc}") from None


def _hash_part(hasher: Any, path: str, fd: int, offset: int, data: bytes | MappedPart) -> None:
    """Hash the part in file order. A mapped part is hashed from a small cache-hot copy read with
    pread, never by touching the map: a page lost to a truncation would be a SIGBUS there."""
    if not isinstance(data, MappedPart):
        hasher.update(data)
        return
    buf = _hash_buffer()
    view = memoryview(buf)
    try:
        done = 0
        while done < len(data):
            want = min(len(buf), len(data) - done)
            n = os.preadv(fd, [view[:want]], offset + done)
            if n == 0:
                raise StorekitError(f"{path}: file shrank while being read (at byte {offset + done})")
            hasher.update(view[:n])
            done += n
    except OSError as exc:
        raise _local_error(path, exc) from None
    finally:
        view.release()


_HASH_PIECE = 1024 * 1024  # fits the L2 cache: the copy and the hash both hit it
_local = threading.local()


def _hash_buffer() -> bytearray:
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = bytearray(_HASH_PIECE)
    return buf


def _md5(data: bytes | MappedPart) -> str:
    return hashlib.md5(data.view if isinstance(data, MappedPart) else data).hexdigest()


def _body(data: bytes | MappedPart) -> Any:
    return data.body() if isinstance(data, MappedPart) else data


def _part_sent(data: bytes | MappedPart, fd: _SharedFd | None, offset: int) -> None:
    if isinstance(data, MappedPart):
        data.close()
        if fd is not None:
            fadvise_dontneed(fd.fd, offset, len(data))  # unmapped first: mapped pages are not dropped


class _SharedFd:
    """A dup of the source's descriptor, kept until its last part is sent (to drop those pages from
    the cache and stat the file at completion): one reference for the reader, one per part, one for
    the complete. `on_closed` runs after the last reference is released."""

    def __init__(self, fd: int, path: str, *, on_closed: Callable[[], None] = lambda: None) -> None:
        self.fd = os.dup(fd)
        self.path = path
        self._refs = 1
        self._lock = threading.Lock()
        self._on_closed = on_closed

    @property
    def in_use(self) -> bool:
        with self._lock:
            return self._refs > 0

    def acquire(self) -> None:
        with self._lock:
            self._refs += 1

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if last:
            os.close(self.fd)
            self._on_closed()


def _pread_exact(path: str, fd: int, offset: int, length: int) -> bytes:
    try:
        data = os.pread(fd, length, offset)
        if len(data) == length:
            return data
        chunks = [data]
        got = len(data)
        while got < length:
            more = os.pread(fd, length - got, offset + got)
            if not more:
                raise StorekitError(f"{path}: file shrank while being read (at byte {offset + got})")
            chunks.append(more)
            got += len(more)
        return b"".join(chunks)
    except OSError as exc:
        raise _local_error(path, exc) from None


def _check_unchanged(path: str, fd: int, before: os.stat_result) -> None:
    now = os.fstat(fd)
    if (now.st_size, now.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        raise StorekitError(
            f"{path}: changed while being uploaded (size {before.st_size} -> {now.st_size})",
            hint="upload it once its writer has finished",
        )


def _local_error(path: str, exc: OSError) -> StorekitError:
    return storage_error(exc, path) or StorekitError(f"{path}: {exc}")


def _failed(exc: BaseException) -> cf.Future[UploadResult]:
    fut: cf.Future[UploadResult] = cf.Future()
    fut.set_exception(exc)
    return fut
