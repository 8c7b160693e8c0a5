"""Small C helpers compiled with the system's C compiler on first use, cached per user.

The library is cached under $STOREKIT_CACHE_DIR (default $XDG_CACHE_HOME/storekit or ~/.cache/storekit),
named by a hash of the source, machine, libc and ABI, written to a temporary name and renamed (processes
starting together never load a half-written file). Callers fall back to Python when `Unavailable`.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

CFLAGS = ["-O2", "-std=c11", "-fPIC", "-shared", "-Wall"]
COMPILE_TIMEOUT_S = 120


class Unavailable(Exception):
    """Why a compiled helper cannot be used (one line)."""


def load(
    source: Path, abi: int, cflags: list[str], opener: Callable[[Path], T], *, switch: str
) -> tuple[T | None, str]:
    """(opener(library), "") or (None, why not): the helper built from `source` where it is not
    cached yet (or its cached copy does not open), unless the environment variable `switch` is 0."""
    if os.environ.get(switch, "1").strip().lower() in ("0", "no", "off", "false"):
        return None, f"{switch}=0"
    try:
        path = library_path(source, abi)
        private_dir(path.parent)
        if path.exists():
            try:
                return opener(path), ""
            except Unavailable:
                path.unlink(missing_ok=True)  # damaged: build it again
        build(source, path, cflags)
        return opener(path), ""
    except Unavailable as exc:
        return None, str(exc)


def open_library(path: Path, abi_symbol: str, abi: int, *, keep_gil: bool) -> Any:
    """The library at `path` whose `abi_symbol()` answers `abi`. keep_gil: a PyDLL (calls keep the
    GIL: cheaper per call), else a CDLL (released while C runs)."""
    try:
        lib = (ctypes.PyDLL if keep_gil else ctypes.CDLL)(str(path))
        version = getattr(lib, abi_symbol)()
    except (OSError, AttributeError) as exc:
        raise Unavailable(f"cannot load {path}: {exc}") from None
    if version != abi:
        raise Unavailable(f"{path}: ABI {version}, expected {abi}")
    return lib


def cache_dir() -> Path:
    explicit = os.environ.get("STOREKIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "storekit"


def library_path(source: Path, abi: int) -> Path:
    """Where `source`, built for this machine and libc, lives in the cache."""
    key = hashlib.sha256(source.read_bytes())
    key.update(f"{sys.platform} {platform.machine()} {platform.libc_ver()} {abi}".encode())
    return cache_dir() / f"{source.stem}-{key.hexdigest()[:16]}.so"


def build(source: Path, path: Path, cflags: list[str] = CFLAGS) -> None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise Unavailable("no C compiler (cc) on PATH")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        done = subprocess.run(
            [*cc.split(), *cflags, "-o", str(tmp), str(source)],
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
        raise Unavailable(f"{cc} could not compile {source.name}: {first}")
    os.replace(tmp, path)


def private_dir(folder: Path) -> None:
    """The cache holds code this process loads: it must be ours and writable by nobody else."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.stat()
    except OSError as exc:
        raise Unavailable(f"cache directory {folder}: {exc.strerror}") from None
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise Unavailable(f"cache directory {folder} is not private to this user (owner or mode)")
