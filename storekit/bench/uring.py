"""A minimal io_uring for reads, through ctypes, with the rings viewed as numpy arrays and flat memoryviews.

Why: a Python thread per in-flight I/O tops out near 45k 4 KiB reads/s on a 2-core machine (GIL
hand-offs), while the disk does 130k. With io_uring one thread keeps a queue depth of 32 from a few
system calls per batch. Two ways in: numpy batches (`prepare`/`enter`/`reap`, for setup and tests),
and the flat views the benchmark's hot loop uses to rewrite single fields of entries it owns
(see engine_posix.RandRead._run_uring); a ring is driven one way or the other, not both.

Only what the benchmark needs: no SQPOLL, no registered buffers. `Ring()` raises OSError where io_uring
is missing or forbidden (old kernels, seccomp in containers, io_uring_disabled); callers fall back to
threads and report which engine ran.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import platform

import numpy as np

SYS_IO_URING_SETUP = 425  # same number on every architecture (added after the syscall table unification)
SYS_IO_URING_ENTER = 426
IORING_OFF_SQ_RING = 0
IORING_OFF_CQ_RING = 0x8000000
IORING_OFF_SQES = 0x10000000
IORING_ENTER_GETEVENTS = 1
# fio also asks for COOP_TASKRUN | SINGLE_ISSUER | DEFER_TASKRUN; from Python they measured slower
# (completions trickle in smaller batches, so more loops), so rings are plain unless asked otherwise
IORING_SETUP_COOP_TASKRUN = 1 << 8
IORING_SETUP_SINGLE_ISSUER = 1 << 12
IORING_SETUP_DEFER_TASKRUN = 1 << 13
SETUP_FLAGS: tuple[int, ...] = (0,)
IORING_OP_READ = 22
IORING_OP_WRITE = 23
_U32 = 0xFFFFFFFF

SQE_DTYPE = np.dtype(
    [
        ("opcode", np.uint8),
        ("flags", np.uint8),
        ("ioprio", np.uint16),
        ("fd", np.int32),
        ("off", np.uint64),
        ("addr", np.uint64),
        ("len", np.uint32),
        ("rw_flags", np.uint32),
        ("user_data", np.uint64),
        ("buf_index", np.uint16),
        ("personality", np.uint16),
        ("splice_fd_in", np.int32),
        ("addr3", np.uint64),
        ("pad", np.uint64),
    ]
)
CQE_DTYPE = np.dtype([("user_data", np.uint64), ("res", np.int32), ("flags", np.uint32)])
assert SQE_DTYPE.itemsize == 64 and CQE_DTYPE.itemsize == 16
# where those fields sit in the flat views: entry i's offset is sqe64[i * SQE_U64 + SQE_OFF], ...
SQE_U64, SQE_OFF = 8, 1  # u64 items per entry, and the offset's
SQE_U32, SQE_FD, SQE_LEN = 16, 1, 6  # u32 / i32 items per entry, the fd's and the length's
CQE_U64, CQE_U32, CQE_RES = 2, 4, 2  # a completion's user_data is its first u64, res its third i32


class _SqOffsets(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint32)
        for name in ("head", "tail", "ring_mask", "ring_entries", "flags", "dropped", "array", "resv1")
    ] + [("user_addr", ctypes.c_uint64)]


class _CqOffsets(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint32)
        for name in ("head", "tail", "ring_mask", "ring_entries", "overflow", "cqes", "flags", "resv1")
    ] + [("user_addr", ctypes.c_uint64)]


class _Params(ctypes.Structure):
    _fields_ = [
        ("sq_entries", ctypes.c_uint32),
        ("cq_entries", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("sq_thread_cpu", ctypes.c_uint32),
        ("sq_thread_idle", ctypes.c_uint32),
        ("features", ctypes.c_uint32),
        ("wq_fd", ctypes.c_uint32),
        ("resv", ctypes.c_uint32 * 3),
        ("sq_off", _SqOffsets),
        ("cq_off", _CqOffsets),
    ]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def read_entries(fds: np.ndarray, offsets: np.ndarray, addrs: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Submission entries for reads; user_data is the entry's position (the caller's slot)."""
    entries = np.zeros(len(offsets), dtype=SQE_DTYPE)
    entries["opcode"] = IORING_OP_READ
    entries["fd"] = fds
    entries["off"] = offsets
    entries["addr"] = addrs
    entries["len"] = lengths
    entries["user_data"] = np.arange(len(offsets))
    return entries


class Ring:
    """One io_uring instance with numpy views on its submission and completion rings."""

    def __init__(self, entries: int) -> None:
        if platform.system() != "Linux":
            raise OSError("io_uring is Linux only")
        self._syscall = _libc().syscall
        self._syscall.restype = ctypes.c_long
        # a second handle with fixed argument types: no ctypes objects to build on the hot path
        self._enter = _libc().syscall
        self._enter.restype = ctypes.c_long
        self._enter.argtypes = [
            ctypes.c_long,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_size_t,
        ]
        # the hot-path handle: no argtypes and no errno copy cost ~1 us less per call (libffi widens
        # the int arguments to full registers); a -1 from it is re-issued through _enter for errno
        self.enter_fast = ctypes.CDLL(None, use_errno=False).syscall
        self.enter_fast.restype = ctypes.c_long
        for flags in SETUP_FLAGS:  # older kernels refuse newer flags with EINVAL
            params = _Params()
            params.flags = flags
            fd = self._syscall(SYS_IO_URING_SETUP, ctypes.c_uint(entries), ctypes.byref(params))
            err = ctypes.get_errno() if fd < 0 else 0
            if fd >= 0 or err != 22:
                break
        if fd < 0:
            raise OSError(err, f"io_uring_setup: {os.strerror(err)}")
        self.flags = params.flags
        self.fd = int(fd)
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        sq, cq = params.sq_off, params.cq_off
        self.entries = params.sq_entries
        try:
            self._sq_mm = mmap.mmap(
                self.fd, sq.array + self.entries * 4, flags, prot, offset=IORING_OFF_SQ_RING
            )
            self._cq_mm = mmap.mmap(
                self.fd, cq.cqes + params.cq_entries * 16, flags, prot, offset=IORING_OFF_CQ_RING
            )
            self._sqe_mm = mmap.mmap(self.fd, self.entries * 64, flags, prot, offset=IORING_OFF_SQES)
        except OSError:
            os.close(self.fd)
            raise

        def u32(mm: mmap.mmap, offset: int, count: int = 1) -> np.ndarray:
            return np.frombuffer(mm, dtype=np.uint32, count=count, offset=offset)

        self._sq_head, self._sq_tail = u32(self._sq_mm, sq.head), u32(self._sq_mm, sq.tail)
        self._sq_mask = int(u32(self._sq_mm, sq.ring_mask)[0])
        self._cq_head, self._cq_tail = u32(self._cq_mm, cq.head), u32(self._cq_mm, cq.tail)
        self._cq_mask = int(u32(self._cq_mm, cq.ring_mask)[0])
        u32(self._sq_mm, sq.array, self.entries)[:] = np.arange(self.entries, dtype=np.uint32)
        self._sqes = np.frombuffer(self._sqe_mm, dtype=SQE_DTYPE, count=self.entries)
        self._cqes = np.frombuffer(self._cq_mm, dtype=CQE_DTYPE, count=params.cq_entries, offset=cq.cqes)
        self._pending = 0  # prepared but not yet submitted
        # flat views for loops that touch single fields (a numpy call costs ~1 us, an index ~40 ns)
        self.sq32 = memoryview(self._sq_mm).cast("I")
        self.sq_tail_at, self.sq_array_at, self.sq_mask = sq.tail // 4, sq.array // 4, self._sq_mask
        self.cq32 = memoryview(self._cq_mm).cast("I")
        self.cq_head_at, self.cq_tail_at, self.cq_mask = cq.head // 4, cq.tail // 4, self._cq_mask
        self.cqe64, self.cqe64_at = memoryview(self._cq_mm).cast("Q"), cq.cqes // 8
        self.cqe32i, self.cqe32i_at = memoryview(self._cq_mm).cast("i"), cq.cqes // 4
        self.sqe64 = memoryview(self._sqe_mm).cast("Q")
        self.sqe32 = memoryview(self._sqe_mm).cast("I")
        self.sqe32i = memoryview(self._sqe_mm).cast("i")

    def prepare(self, entries: np.ndarray) -> None:
        """Queue filled-in submission entries (SQE_DTYPE); they go to the kernel on the next `enter`."""
        n = len(entries)
        tail = int(self._sq_tail[0])
        if n + ((tail - int(self._sq_head[0])) & _U32) > self.entries:
            raise OSError("io_uring submission queue full")
        start = tail & self._sq_mask
        if start + n <= self.entries:
            self._sqes[start : start + n] = entries
        else:
            self._sqes[(tail + np.arange(n)) & self._sq_mask] = entries
        self._sq_tail[0] = (tail + n) & _U32  # published to the kernel by the enter syscall
        self._pending += n

    def enter(self, min_complete: int, submit: int | None = None) -> None:
        """Submit prepared entries (all, or `submit` of them) and wait for `min_complete` completions."""
        want = self._pending if submit is None else min(submit, self._pending)
        while True:
            flags = IORING_ENTER_GETEVENTS if min_complete else 0
            ret = self._enter(SYS_IO_URING_ENTER, self.fd, want, min_complete, flags, None, 0)
            if ret >= 0:
                done = min(int(ret), want)
                self._pending -= done
                want -= done
                if want == 0:
                    return
                continue
            err = ctypes.get_errno()
            if err in (4, 11, 16):  # EINTR, EAGAIN, EBUSY: retry (completions are reaped by the caller)
                if err != 4 and self.ready():
                    return
                continue
            raise OSError(err, f"io_uring_enter: {os.strerror(err)}")

    def ready(self) -> int:
        return (int(self._cq_tail[0]) - int(self._cq_head[0])) & _U32

    def reap(self) -> tuple[np.ndarray, np.ndarray]:
        """(user_data, result) of every completion posted so far."""
        head = int(self._cq_head[0])
        n = (int(self._cq_tail[0]) - head) & _U32
        start = head & self._cq_mask
        if start + n <= len(self._cqes):
            entries = self._cqes[start : start + n].copy()  # copy: the slots are reused once head moves
        else:
            entries = self._cqes[(head + np.arange(n)) & self._cq_mask]
        self._cq_head[0] = (head + n) & _U32
        return entries["user_data"].astype(np.int64), entries["res"].astype(np.int64)

    def own_reads(self, slots: int, fd: int, address: int, stride: int, length: int) -> None:
        """Fill entry i (i < slots) as a read of `length` bytes from `fd` into address + i*stride,
        tagged i: the hot loop then rewrites only offsets (and fd, length) before queueing slot i."""
        if slots > self.entries:
            raise ValueError(f"{slots} slots for a ring of {self.entries} entries")
        self._sqes[:slots] = np.zeros(slots, dtype=SQE_DTYPE)
        self._sqes["opcode"][:slots] = IORING_OP_READ
        self._sqes["fd"][:slots] = fd
        self._sqes["addr"][:slots] = address + np.arange(slots, dtype=np.uint64) * stride
        self._sqes["len"][:slots] = length
        self._sqes["user_data"][:slots] = np.arange(slots)

    def enter_raw(self, submit: int, min_complete: int, flags: int) -> int:
        """io_uring_enter through the errno-keeping handle (no retries): the count submitted, or -errno."""
        ret = int(self._enter(SYS_IO_URING_ENTER, self.fd, submit, min_complete, flags, None, 0))
        return ret if ret >= 0 else -ctypes.get_errno()

    def push(self, count: int, done: int) -> None:
        """Finish handing `count` entries already in the submission ring to the kernel, `done` of
        which an enter_fast call took: retry interrupted or partial submits, raise on real errors."""
        for _ in range(1000):
            if done >= count:
                return
            ret = self.enter_raw(count - done, 0, 0)
            if ret > 0:
                done += ret
            elif ret == 0 or -ret not in (4, 11, 16):  # EINTR, EAGAIN, EBUSY are worth a retry
                err = -ret if ret < 0 else 5  # nothing taken at all: EIO
                raise OSError(err, f"io_uring_enter: {os.strerror(err)}")
        raise OSError(16, "io_uring_enter: submission queue stays busy")

    def close(self) -> None:
        for name in ("_sq_head", "_sq_tail", "_cq_head", "_cq_tail", "_sqes", "_cqes"):
            setattr(self, name, None)
        for view in (self.sq32, self.cq32, self.cqe64, self.cqe32i, self.sqe64, self.sqe32, self.sqe32i):
            view.release()
        for mm in (self._sq_mm, self._cq_mm, self._sqe_mm):
            with contextlib.suppress(BufferError):  # a stray view: the mapping goes with the process
                mm.close()
        os.close(self.fd)


def available() -> tuple[bool, str]:
    """Whether io_uring works here, and why not."""
    try:
        Ring(2).close()
    except OSError as exc:
        return False, str(exc)
    return True, ""
