"""Durable writes to local paths: fsync, and files that appear whole (sibling temp + rename)."""

from __future__ import annotations

import contextlib
import os
import uuid

TMP_MARK = ".storekit-tmp-"  # every temporary name we create contains this (layout check knows it)


def fsync_file(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or create in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomic(path: str | os.PathLike[str], data: bytes, *, mode: int | None = None) -> None:
    """Readers see the old file or all of `data`, never part of it; a failure leaves no temp file.

    `mode` is set before the rename; without it the umask decides, as for open().
    """
    directory, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(directory, f".{name}{TMP_MARK}{uuid.uuid4().hex[:12]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
