"""Random reads at a queue depth driven by the compiled loop in timed_ops.c (`sk_randread`).

uring.Ring sets the ring up and maps it; this module hands the C loop pointers into those mappings,
the files and window geometry, and output buffers, and drains the buffers into the Recorder each
time the loop returns to say they are full. The call releases the GIL (CDLL), so a progress thread
is not starved. Where the library is missing, engine_posix keeps its Python loop and says so.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np

from storekit.bench import native, uring
from storekit.bench.recorder import Recorder

LATENCIES = 1 << 16  # completions recorded per flush
TRACE = 3 * 4096  # (end ns, bytes, reads) triples per flush
MAX_GROUP = 64  # the C loop's pending array
BAD_READ = 2  # sk_randread's answer for a short or failed read

_P64 = ctypes.POINTER(ctypes.c_uint64)
_P32 = ctypes.POINTER(ctypes.c_uint32)


class _Ring(ctypes.Structure):
    _fields_ = [
        ("fd", ctypes.c_int),
        ("sq_mask", ctypes.c_uint32),
        ("cq_mask", ctypes.c_uint32),
        ("sq_tail", _P32),
        ("sq_array", _P32),
        ("cq_head", _P32),
        ("cq_tail", _P32),
        ("sqes", _P64),
        ("cqes", _P64),
    ]


class _Windows(ctypes.Structure):
    _fields_ = [
        ("fds", ctypes.POINTER(ctypes.c_int32)),
        ("nfiles", ctypes.c_int32),
        ("align", ctypes.c_int32),
        ("windows", ctypes.c_int64),
        ("window", ctypes.c_int64),
        ("rng", ctypes.c_uint64),
    ]


_I64 = ctypes.POINTER(ctypes.c_int64)


class _State(ctypes.Structure):
    _fields_ = [
        ("qd", ctypes.c_int32),
        ("group", ctypes.c_int32),
        ("inflight", ctypes.c_int32),
        ("started", ctypes.c_int32),
        ("deadline", ctypes.c_int64),
        ("submitted", _I64),
        ("expected", _I64),
        ("file_of", ctypes.POINTER(ctypes.c_int32)),
        ("lat", _I64),
        ("lat_cap", ctypes.c_int64),
        ("lat_n", ctypes.c_int64),
        ("trace", _I64),
        ("trace_cap", ctypes.c_int64),
        ("trace_n", ctypes.c_int64),
        ("bytes", ctypes.c_int64),
        ("ops", ctypes.c_int64),
        ("fail_res", ctypes.c_int64),
        ("fail_file", ctypes.c_int64),
        ("fail_offset", ctypes.c_int64),
    ]


def loop_function() -> tuple[Any, str]:
    """(the compiled sk_randread, "") or (None, why not)."""
    ops, why_not = native.load()
    if ops is None:
        return None, why_not
    fn = ctypes.CDLL(str(ops.path)).sk_randread  # CDLL: the GIL is released for the whole run
    fn.restype = ctypes.c_int
    return fn, ""


def _ptr(mm: Any, offset: int, kind: Any) -> Any:
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    return ctypes.cast(base + offset, kind)


class _Buffers:
    """numpy arrays the C loop writes, and the structs pointing at them (kept alive together)."""

    def __init__(self, qd: int) -> None:
        self.submitted = np.zeros(qd, dtype=np.int64)
        self.expected = np.zeros(qd, dtype=np.int64)
        self.file_of = np.zeros(qd, dtype=np.int32)
        self.lat = np.zeros(LATENCIES, dtype=np.int64)
        self.trace = np.zeros(TRACE, dtype=np.int64)

    def i64(self, a: np.ndarray) -> Any:
        return a.ctypes.data_as(_I64)


def run(
    fn: Any,
    ring: uring.Ring,
    fds: list[int],
    *,
    windows: int,
    window: int,
    align: int,
    seed: int,
    qd: int,
    group: int,
    deadline: int,
    rec: Recorder,
    fail: Any,
) -> None:
    """Keep `qd` reads in flight until `deadline` (perf_counter_ns), recording into `rec`.
    `fail(res, file index, offset)` raises for a read that came back short or failed."""
    sq_mm, cq_mm, sqe_mm = ring.mmaps()
    r = _Ring(
        fd=ring.fd,
        sq_mask=ring.sq_mask,
        cq_mask=ring.cq_mask,
        sq_tail=_ptr(sq_mm, ring.sq_tail_at * 4, _P32),
        sq_array=_ptr(sq_mm, ring.sq_array_at * 4, _P32),
        cq_head=_ptr(cq_mm, ring.cq_head_at * 4, _P32),
        cq_tail=_ptr(cq_mm, ring.cq_tail_at * 4, _P32),
        sqes=_ptr(sqe_mm, 0, _P64),
        cqes=_ptr(cq_mm, ring.cqe64_at * 8, _P64),
    )
    fd_array = np.asarray(fds, dtype=np.int32)
    w = _Windows(
        fds=fd_array.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
        nfiles=len(fds),
        align=align,
        windows=windows,
        window=window,
        rng=seed & 0xFFFFFFFFFFFFFFFF,
    )
    b = _Buffers(qd)
    s = _State(
        qd=qd,
        group=max(1, min(group, MAX_GROUP)),
        deadline=deadline,
        submitted=b.i64(b.submitted),
        expected=b.i64(b.expected),
        file_of=b.file_of.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
        lat=b.i64(b.lat),
        lat_cap=LATENCIES,
        trace=b.i64(b.trace),
        trace_cap=TRACE,
    )
    try:
        while True:
            rc = fn(ctypes.byref(r), ctypes.byref(w), ctypes.byref(s))
            _flush(b, s, rec)
            if rc == 0:
                return
            if rc == BAD_READ:
                fail(int(s.fail_res), int(s.fail_file), int(s.fail_offset))
            if rc < 0:
                raise OSError(-rc, f"io_uring_enter: {os.strerror(-rc)}")
    finally:
        del r  # pointers into the mappings go before the ring can close them


def _flush(b: _Buffers, s: _State, rec: Recorder) -> None:
    if s.lat_n:
        rec.latency.record_many(b.lat[: s.lat_n].copy())
    for i in range(0, s.trace_n, 3):
        t, nbytes, count = (int(x) for x in b.trace[i : i + 3])
        rec.trace.add(t + rec.wall_offset, nbytes, count)
        rec.bytes += nbytes
        rec.ops += count
    s.lat_n = s.trace_n = 0
