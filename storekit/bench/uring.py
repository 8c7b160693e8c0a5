"""A minimal io_uring for reads, through ctypes, with the rings seen through flat memoryviews.

Why: a Python thread per in-flight I/O tops out near 45k 4 KiB reads/s on a 2-core machine (GIL
hand-offs), while the disk does 130k. With io_uring one thread keeps a queue depth of 32 from a few
system calls per batch. The caller owns one submission entry per slot (`own_reads`) and rewrites
single fields of it, queues slots and reaps completions through the views; a numpy call costs ~1 us,
an index ~40 ns (see engine_posix.RandRead._run_uring).

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
U32 = 0xFFFFFFFF  # ring heads and tails wrap at 2**32

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
assert SQE_DTYPE.itemsize == 64
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


class Ring:
    """One io_uring instance with flat views on its submission and completion rings."""

    def __init__(self, entries: int) -> None:
        if platform.system() != "Linux":
            raise OSError("io_uring is Linux only")
        # errno-keeping handle, for setup and error paths
        self._syscall = _libc().syscall
        self._syscall.restype = ctypes.c_long
        # the hot-path handle: no argtypes and no errno copy cost ~1 us less per call (libffi widens
        # the int arguments to full registers); a -1 from it is re-issued through enter_raw for errno
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
        self._sqes = np.frombuffer(self._sqe_mm, dtype=SQE_DTYPE, count=self.entries)
        self.sq32 = memoryview(self._sq_mm).cast("I")
        self.sq_tail_at, self.sq_array_at = sq.tail // 4, sq.array // 4
        self.sq_mask = self.sq32[sq.ring_mask // 4]
        self.cq32 = memoryview(self._cq_mm).cast("I")
        self.cq_head_at, self.cq_tail_at = cq.head // 4, cq.tail // 4
        self.cq_mask = self.cq32[cq.ring_mask // 4]
        self.cqe64, self.cqe64_at = memoryview(self._cq_mm).cast("Q"), cq.cqes // 8
        self.cqe32i, self.cqe32i_at = memoryview(self._cq_mm).cast("i"), cq.cqes // 4
        self.sqe64 = memoryview(self._sqe_mm).cast("Q")
        self.sqe32 = memoryview(self._sqe_mm).cast("I")
        self.sqe32i = memoryview(self._sqe_mm).cast("i")

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

    def mmaps(self) -> tuple[mmap.mmap, mmap.mmap, mmap.mmap]:
        """The submission ring, completion ring and submission entries, for a compiled loop."""
        return self._sq_mm, self._cq_mm, self._sqe_mm

    def enter_raw(self, submit: int, min_complete: int, flags: int) -> int:
        """io_uring_enter through the errno-keeping handle (no retries): the count submitted, or -errno."""
        ret = int(self._syscall(SYS_IO_URING_ENTER, self.fd, submit, min_complete, flags, None, 0))
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
        self._sqes = None  # type: ignore[assignment]  # drops its export of the mapping
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
