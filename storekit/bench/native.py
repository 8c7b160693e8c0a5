"""Small-file operations timed in C (timed_ops.c), compiled with the system's C compiler on first use.

Why: a page-cached stat takes ~2 us. Timed from Python, the window also holds the ctypes call and
the return to the interpreter; timed_ops.c reads the clock around the system calls alone, as fio
does (same 5,000 files on the dev VM: fio 2.3 us, this 2.1-2.2 us, Python 2.7-2.9 us). The loop over
files stays in Python.

The library is cached per user under $STOREKIT_CACHE_DIR (default $XDG_CACHE_HOME/storekit or
~/.cache/storekit), named by a hash of the source, machine and libc, written to a temporary name and
renamed (workers starting together never load a half-written file). Without a compiler, or with
STOREKIT_BENCH_NATIVE=0, `load()` says why and the benchmark times these operations in Python.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SOURCE = Path(__file__).with_name("timed_ops.c")
ABI = 1  # SK_ABI in timed_ops.c
OPS = {"create": "sk_create", "stat": "sk_stat", "readsmall": "sk_read", "delete": "sk_unlink"}
CFLAGS = ["-O2", "-std=c11", "-fPIC", "-shared", "-Wall"]
COMPILE_TIMEOUT_S = 120


class Unavailable(Exception):
    """Why the compiled operations cannot be used (one line)."""


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


def cache_dir() -> Path:
    explicit = os.environ.get("STOREKIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "storekit"


def library_path() -> Path:
    """Where this source, built for this machine and libc, lives in the cache."""
    key = hashlib.sha256(SOURCE.read_bytes())
    key.update(f"{sys.platform} {platform.machine()} {platform.libc_ver()} {ABI}".encode())
    return cache_dir() / f"timed_ops-{key.hexdigest()[:16]}.so"


def disabled() -> bool:
    return os.environ.get("STOREKIT_BENCH_NATIVE", "1").strip().lower() in ("0", "no", "off", "false")


@functools.cache
def load() -> tuple[TimedOps | None, str]:
    """(the operations, "") or (None, why not). Builds the library when it is not cached yet."""
    if disabled():
        return None, "STOREKIT_BENCH_NATIVE=0"
    try:
        path = library_path()
        _private_dir(path.parent)
        if path.exists():
            try:
                return TimedOps(path, _open(path)), ""
            except Unavailable:
                path.unlink(missing_ok=True)  # damaged: build it again
        build(path)
        return TimedOps(path, _open(path)), ""
    except Unavailable as exc:
        return None, str(exc)


def _open(path: Path) -> Any:
    # PyDLL: the calls keep the GIL (a meta worker is one thread), which saves a release and
    # re-acquire per file; errno travels in the return value
    try:
        lib = ctypes.PyDLL(str(path))
        version = lib.sk_abi()
    except (OSError, AttributeError) as exc:
        raise Unavailable(f"cannot load {path}: {exc}") from None
    if version != ABI:
        raise Unavailable(f"{path}: ABI {version}, expected {ABI}")
    for name in OPS.values():
        getattr(lib, name).restype = ctypes.c_int
    return lib


def build(path: Path) -> None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise Unavailable("no C compiler (cc) on PATH")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        done = subprocess.run(
            [*cc.split(), *CFLAGS, "-o", str(tmp), str(SOURCE)],
            capture_output=True,
            text=True,
            timeout=COMPILE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        tmp.unlink(missing_ok=True)
        raise Unavailable(f"C compiler {cc!r} did not run: {exc}") from None
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        first = next((ln for ln in done.stderr.splitlines() if ln.strip()), f"exit {done.returncode}")
        raise Unavailable(f"{cc} could not compile {SOURCE.name}: {first}")
    os.replace(tmp, path)


def _private_dir(folder: Path) -> None:
    """The cache holds code this process loads: it must be ours and writable by nobody else."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.stat()
    except OSError as exc:
        raise Unavailable(f"cache directory {folder}: {exc.strerror}") from None
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise Unavailable(f"cache directory {folder} is not private to this user (owner or mode)")
