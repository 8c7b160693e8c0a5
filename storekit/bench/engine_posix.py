"""POSIX I/O for the workers: O_DIRECT with aligned buffers, pwritev/preadv, io_uring for queue depth.

Buffers are anonymous mmaps (page aligned, as O_DIRECT requires) filled with random bytes, and every
written block carries its file and offset in its first 16 bytes, so compression or deduplication in
the storage cannot flatter the numbers. Where a filesystem refuses O_DIRECT (EINVAL) the worker falls
back to buffered I/O and says so; it never pretends.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import time
from typing import Any

import numpy as np

from storekit.bench import uring
from storekit.bench.plan import WorkerTask
from storekit.bench.spec import DIRECT_ALIGN
from storekit.bench.worker import Job, Recorder, run_threads

O_DIRECT = getattr(os, "O_DIRECT", 0)
REFUSED = "filesystem refused O_DIRECT; buffered I/O was used"
SUBMIT_GROUP = 4  # io_uring submissions per system call (see RandRead._run_uring)


class IOFailure(OSError):
    """An I/O error with the file it happened on; the coordinator reports it in one line."""

    def __str__(self) -> str:
        return str(self.strerror)


def aligned_buffer(size: int, seed: int) -> mmap.mmap:
    size = max(size, DIRECT_ALIGN)
    buf = mmap.mmap(-1, -(-size // mmap.PAGESIZE) * mmap.PAGESIZE)
    rng = np.random.default_rng(seed)
    np.frombuffer(buf, dtype=np.uint8)[:] = rng.integers(0, 256, size=len(buf), dtype=np.uint8)
    return buf


def open_direct(path: str, flags: int, want_direct: bool, notes: list[str]) -> tuple[int, bool]:
    """Open with O_DIRECT when wanted; fall back (and note it) where the filesystem refuses."""
    if want_direct and O_DIRECT:
        try:
            return os.open(path, flags | O_DIRECT | os.O_CLOEXEC, 0o644), True
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise IOFailure(exc.errno, f"{path}: {exc.strerror}") from None
            if REFUSED not in notes:
                notes.append(REFUSED)
    try:
        return os.open(path, flags | os.O_CLOEXEC, 0o644), False
    except OSError as exc:
        raise IOFailure(exc.errno, f"{path}: {exc.strerror}") from None


class _Base:
    engine = "psync"

    def __init__(self, task: WorkerTask) -> None:
        self.task = task
        self.paths = [os.path.join(task.run_root, f) for f in task.files]
        self.direct: bool | None = task.direct
        self.notes: list[str] = []

    def close(self) -> None:
        return None


class SeqWrite(_Base):
    """Create and write whole files block by block; fsync each before closing (inside the timing)."""

    def __init__(self, task: WorkerTask) -> None:
        super().__init__(task)
        self.buf = aligned_buffer(task.block_size, task.seed)
        self.view = memoryview(self.buf)[: task.block_size]

    def run(self, rec: Recorder) -> None:
        task, bs = self.task, self.task.block_size
        for index, path in enumerate(self.paths):
            # create first (O_EXCL: never overwrite anything), then reopen for direct writes
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
            except OSError as exc:
                raise IOFailure(exc.errno, f"{path}: {exc.strerror}") from None
            fd, direct = open_direct(path, os.O_WRONLY, task.direct, self.notes)
            self.direct = bool(self.direct and direct)
            try:
                for offset in range(0, task.file_size, bs):
                    struct.pack_into("<QQ", self.buf, 0, task.seed * 65_536 + index, offset)
                    t0 = rec.now()
                    written = os.pwritev(fd, [self.view], offset)
                    t1 = rec.now()
                    if written != bs:
                        raise IOFailure(errno.EIO, f"{path}: short write ({written} of {bs} bytes)")
                    rec.op(t0, t1, bs)
                if task.fsync:
                    os.fsync(fd)
            except OSError as exc:
                if isinstance(exc, IOFailure):
                    raise
                raise IOFailure(exc.errno, f"{path}: {exc.strerror}") from None
            finally:
                os.close(fd)

    def close(self) -> None:
        self.view.release()
        self.buf.close()


class SeqRead(_Base):
    """Read whole files block by block, checking every read returns a full block."""

    def __init__(self, task: WorkerTask) -> None:
        super().__init__(task)
        self.buf = aligned_buffer(task.block_size, task.seed)
        self.view = memoryview(self.buf)[: task.block_size]

    def run(self, rec: Recorder) -> None:
        task, bs = self.task, self.task.block_size
        for path in self.paths:
            fd, direct = open_direct(path, os.O_RDONLY, task.direct, self.notes)
            self.direct = bool(self.direct and direct)
            try:
                for offset in range(0, task.file_size, bs):
                    t0 = rec.now()
                    got = os.preadv(fd, [self.view], offset)
                    t1 = rec.now()
                    if got != bs:
                        raise IOFailure(errno.EIO, f"{path}: short read at {offset} ({got} of {bs} bytes)")
                    rec.op(t0, t1, bs)
            except OSError as exc:
                if isinstance(exc, IOFailure):
                    raise
                raise IOFailure(exc.errno, f"{path}: {exc.strerror}") from None
            finally:
                os.close(fd)

    def close(self) -> None:
        self.view.release()
        self.buf.close()


class RandRead(_Base):
    """Random training windows from the shards for `duration` seconds at a queue depth.

    QD 1 uses plain preadv; deeper queues use io_uring from one thread, or one thread per slot where
    io_uring is unavailable. With O_DIRECT, a window that is not 4 KiB aligned is read as the aligned
    range that covers it (what a direct-I/O loader would do); bytes counted are bytes read.
    """

    def __init__(self, task: WorkerTask) -> None:
        super().__init__(task)
        self.fds: list[int] = []
        for path in self.paths:
            fd, direct = open_direct(path, os.O_RDONLY, task.direct, self.notes)
            self.fds.append(fd)
            self.direct = bool(self.direct and direct)
        self.align = DIRECT_ALIGN if self.direct else 1
        self.windows = task.file_size // task.window
        slot = -(-task.window // self.align) * self.align + (self.align if self.align > 1 else 0)
        self.slot_bytes = -(-slot // DIRECT_ALIGN) * DIRECT_ALIGN
        self.qd = task.queue_depth
        self.buf = aligned_buffer(self.slot_bytes * self.qd, task.seed)
        self.rng = np.random.default_rng(task.seed)
        self.ring: uring.Ring | None = None
        self.engine = "psync"
        if self.qd > 1:
            try:
                self.ring = uring.Ring(max(self.qd, 2))
                self.engine = "io_uring"
            except OSError as exc:
                self.engine = "threads"
                self.notes.append(f"io_uring unavailable ({exc}); one thread per queue slot")

    def draw(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(file index, aligned offset, length) of n random windows."""
        files = self.rng.integers(0, len(self.fds), size=n)
        start = self.rng.integers(0, self.windows, size=n, dtype=np.int64) * self.task.window
        low = start // self.align * self.align
        high = -(-(start + self.task.window) // self.align) * self.align
        return files, low, high - low

    def run(self, rec: Recorder) -> None:
        deadline = rec.now() + int(self.task.duration * 1e9)
        if self.ring is not None:
            self._run_uring(rec, deadline)
        elif self.qd > 1:
            run_threads(self.qd, lambda i, r: self._run_sync(r, deadline, i), rec)
        else:
            self._run_sync(rec, deadline, 0)

    def _run_sync(self, rec: Recorder, deadline: int, slot: int) -> None:
        """One request at a time; the loop only appends clock readings, bookkeeping is per batch."""
        view = memoryview(self.buf)[slot * self.slot_bytes : (slot + 1) * self.slot_bytes]
        views: dict[int, memoryview] = {}
        fds, now, preadv, batch = self.fds, time.perf_counter_ns, os.preadv, 4096
        try:
            t1 = now()
            while t1 < deadline:
                files, offsets, lengths = self.draw(batch)
                starts: list[int] = []
                ends: list[int] = []
                sizes = lengths.tolist()
                for f, off, length in zip(files.tolist(), offsets.tolist(), sizes, strict=True):
                    buf = views.get(length) or views.setdefault(length, view[:length])
                    t0 = now()
                    got = preadv(fds[f], [buf], off)
                    t1 = now()
                    if got != length:
                        rec.bulk(starts, ends, sizes[: len(ends)])
                        raise IOFailure(errno.EIO, f"{self.paths[f]}: short read at {off}")
                    starts.append(t0)
                    ends.append(t1)
                    if t1 >= deadline:
                        break
                rec.bulk(starts, ends, sizes[: len(ends)])
        finally:
            for v in views.values():
                v.release()
            view.release()

    def _run_uring(self, rec: Recorder, deadline: int) -> None:
        """Keep `qd` reads in flight: reap whatever completed and resubmit as many, like fio.

        fio submits each I/O with its own system call. Submitting all replacements at once instead
        turns a virtual disk's batched completions into a convoy (measured: 0.6x fio's IOPS at QD 32),
        while one call per I/O costs Python too much; groups of SUBMIT_GROUP keep the device fed
        with a steady stream (0.9x-1.0x). Requests are drawn in bulk up front and latencies are
        histogrammed in bulk, so the loop itself stays a handful of numpy operations."""
        ring, qd = self.ring, self.qd
        assert ring is not None
        addrs = uring.buffer_address(self.buf) + np.arange(qd, dtype=np.uint64) * self.slot_bytes
        fds = np.asarray(self.fds, dtype=np.int32)
        lengths = np.zeros(qd, dtype=np.int64)
        submitted = np.zeros(qd, dtype=np.int64)
        pool = np.zeros(0, dtype=uring.SQE_DTYPE)
        used = 0
        latencies = np.empty(1 << 16, dtype=np.int64)
        filled = 0
        now = time.perf_counter_ns

        def submit(slots: np.ndarray) -> None:
            nonlocal pool, used
            n = len(slots)
            if used + n > len(pool):
                files, offsets, lens = self.draw(max(4 * qd, 1 << 14))
                pool = uring.read_entries(fds[files], offsets.astype(np.uint64), np.zeros(len(files)), lens)
                used = 0
            entries = pool[used : used + n]
            used += n
            entries["addr"] = addrs[slots]
            entries["user_data"] = slots
            if not fixed:
                lengths[slots] = entries["len"]
            ring.prepare(entries)
            times = []
            for i in range(0, n, SUBMIT_GROUP):
                times.append(now())
                ring.submit(min(SUBMIT_GROUP, n - i))
            submitted[slots] = np.repeat(times, SUBMIT_GROUP)[:n]

        # with aligned windows every request has the same length: skip the per-slot bookkeeping
        fixed = self.align == 1 or self.task.window % self.align == 0
        lengths[:] = self.task.window
        submit(np.arange(qd))
        inflight = qd
        while inflight:
            slots, res = ring.reap()
            n = len(slots)
            if n == 0:
                ring.enter(1)
                continue
            t1 = now()
            expected = lengths[0] if fixed else lengths[slots]
            if (res != expected).any():
                bad = int(res[res != expected][0])
                why = os.strerror(-bad) if bad < 0 else f"short read ({bad} bytes)"
                raise IOFailure(-bad if bad < 0 else errno.EIO, f"io_uring read failed: {why}")
            if filled + n > len(latencies):
                rec.latency.record_many(latencies[:filled])
                filled = 0
            latencies[filled : filled + n] = t1 - submitted[slots]
            filled += n
            nbytes = int(expected) * n if fixed else int(np.sum(expected))
            rec.trace.add(t1 + rec.wall_offset, nbytes, n)
            rec.bytes += nbytes
            rec.ops += n
            inflight -= n
            if t1 < deadline:
                submit(slots)
                inflight += n
        rec.latency.record_many(latencies[:filled])

    def close(self) -> None:
        if self.ring is not None:
            self.ring.close()
        for fd in self.fds:
            os.close(fd)
        self.buf.close()


class Meta(_Base):
    """mdtest-style small-file operations: create (with payload), stat, read, delete.

    Each operation's system calls are timed alone; the loops only append two clock readings per file
    and the bookkeeping is done in bulk per chunk, so the benchmark adds little to a 2 us stat."""

    engine = "posix"
    CHUNK = 1 << 16

    def __init__(self, task: WorkerTask) -> None:
        super().__init__(task)
        self.direct = None
        self.names = [os.path.join(task.run_root, n) for n in task.meta_names()]
        self.payload = os.urandom(task.file_size)

    def run(self, rec: Recorder) -> None:
        loop = {"create": self._create, "stat": self._stat, "readsmall": self._read, "delete": self._delete}
        run_chunk = loop[self.task.op]
        nbytes = len(self.payload) if self.task.op in ("create", "readsmall") else 0
        for i in range(0, len(self.names), self.CHUNK):
            starts: list[int] = []
            ends: list[int] = []
            try:
                run_chunk(self.names[i : i + self.CHUNK], starts.append, ends.append)
            except OSError as exc:
                failed = self.names[i + len(ends)]
                raise IOFailure(exc.errno, f"{self.task.op} {failed}: {exc.strerror}") from None
            finally:
                rec.bulk(starts, ends, nbytes)

    def _create(self, names: list[str], started: Any, ended: Any) -> None:
        now, open_, write, close = time.perf_counter_ns, os.open, os.write, os.close
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        payload = self.payload
        for path in names:
            t0 = now()
            fd = open_(path, flags, 0o644)
            if payload:
                write(fd, payload)
            close(fd)
            t1 = now()
            started(t0)
            ended(t1)

    def _stat(self, names: list[str], started: Any, ended: Any) -> None:
        now, stat = time.perf_counter_ns, os.stat
        for path in names:
            t0 = now()
            stat(path)
            t1 = now()
            started(t0)
            ended(t1)

    def _read(self, names: list[str], started: Any, ended: Any) -> None:
        now, open_, read, close = time.perf_counter_ns, os.open, os.read, os.close
        flags, size = os.O_RDONLY | os.O_CLOEXEC, len(self.payload)
        for path in names:
            t0 = now()
            fd = open_(path, flags)
            data = read(fd, size + 1)
            close(fd)
            t1 = now()
            if len(data) != size:
                raise OSError(errno.EIO, f"expected {size} bytes, got {len(data)}")
            started(t0)
            ended(t1)

    def _delete(self, names: list[str], started: Any, ended: Any) -> None:
        now, unlink = time.perf_counter_ns, os.unlink
        for path in names:
            t0 = now()
            unlink(path)
            t1 = now()
            started(t0)
            ended(t1)


def prepare(task: WorkerTask) -> Job:
    kinds: dict[str, Any] = {"write": SeqWrite, "read": SeqRead, "randread": RandRead}
    job: Job = kinds[task.op](task) if task.op in kinds else Meta(task)
    return job
