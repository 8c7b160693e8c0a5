"""Small-file operations timed in C (timed_ops.c), compiled with the system's C compiler on first use.

Why: a page-cached stat takes ~2 us. Timed from Python, the window also holds the ctypes call and
the return to the interpreter; timed_ops.c reads the clock around the system calls alone, as fio
does (same 5,000 files on the dev VM: fio 2.3 us, this 2.1-2.2 us, Python 2.7-2.9 us). The loop over
files stays in Python.

The library is built and cached per user by storekit.cbuild. Without a compiler, or with
STOREKIT_BENCH_NATIVE=0, `load()` says why and the benchmark times these operations in Python.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from storekit import cbuild
from storekit.cbuild import cache_dir as cache_dir  # fastbpe keeps its compiled ranks there too

SOURCE = Path(__file__).with_name("timed_ops.c")
ABI = 2  # SK_ABI in timed_ops.c
OPS = {"create": "sk_create", "stat": "sk_stat", "readsmall": "sk_read", "delete": "sk_unlink"}
CFLAGS = cbuild.CFLAGS


class Times(ctypes.Structure):
    _fields_ = (("start", ctypes.c_void_p), ("end", ctypes.c_void_p))


@dataclass(frozen=True)
class TimedOps:
    """The loaded library: `op(name)(times_ref, slot, path, buf, size)` -> bytes or -errno."""

    path: Path
    lib: Any

    def op(self, name: str) -> Any:
        return getattr(self.lib, OPS[name])

    @staticmethod
    def times(starts: np.ndarray, ends: np.ndarray) -> tuple[Times, Any]:
        """A times struct over two int64 arrays, and the reference to pass (keep both alive)."""
        t = Times(starts.ctypes.data, ends.ctypes.data)
        return t, ctypes.byref(t)


def python_timing_note(why_not: str) -> str:
    return (
        f"small-file operations timed in Python ({why_not}): each latency includes ~0.5 us of "
        "interpreter, which shows only where an operation takes a few us (page-cached metadata)"
    )


def library_path() -> Path:
    """Where this source, built for this machine and libc, lives in the cache."""
    return cbuild.library_path(SOURCE, ABI)


@functools.cache
def load() -> tuple[TimedOps | None, str]:
    """(the operations, "") or (None, why not). Builds the library when it is not cached yet."""
    return cbuild.load(
        SOURCE, ABI, CFLAGS, lambda path: TimedOps(path, _open(path)), switch="STOREKIT_BENCH_NATIVE"
    )


def _open(path: Path) -> Any:
    # PyDLL: the calls keep the GIL (a meta worker is one thread), which saves a release and
    # re-acquire per file; errno travels in the return value
    lib = cbuild.open_library(path, "sk_abi", ABI, keep_gil=True)
    for name in OPS.values():
        getattr(lib, name).restype = ctypes.c_int
    return lib
