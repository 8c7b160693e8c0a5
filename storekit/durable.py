"""Durable writes to local paths: fsync, and files that appear whole (sibling temp + rename)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import uuid
from collections.abc import Callable

from storekit import faults

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
    write_synced(tmp, data, mode=mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_synced(
    path: str | os.PathLike[str], data: bytes, *, mode: int | None = None, exclusive: bool = True
) -> None:
    """`data` as the file `path` (new with `exclusive`, else truncated), fsynced, `mode` set; a
    failure once the file was opened removes it. The first half of write_file_atomic, for a caller
    that renames the file into place itself, later."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(path, flags, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(path, mode)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        raise


def remove_write_temps(path: str | os.PathLike[str]) -> None:
    """Temps that killed writes of `path` (write_file_atomic's naming) left beside it. Only the
    writer that owns `path` may call this: another writer's temp in flight would go too."""
    directory, name = os.path.split(os.path.abspath(path))
    prefix = f".{name}{TMP_MARK}"
    _unlink_entries(directory, lambda entry: entry.startswith(prefix))


def remove_write_temps_in(directory: str | os.PathLike[str]) -> None:
    """Temps that killed writes left in `directory`, whatever file they were for. Only a process that
    alone writes every file there may call this (e.g. `tier gc` for the verified records)."""
    _unlink_entries(directory, lambda entry: TMP_MARK in entry)


def _unlink_entries(directory: str | os.PathLike[str], matches: Callable[[str], bool]) -> None:
    """A write temp is a file of the writer's own: a directory under such a name, or another user's
    file, is not, and is left alone (in a shared sticky directory it may be a neighbour's plant,
    which would otherwise stop the writer with EISDIR or EPERM, or be deleted by root's run)."""
    me = os.geteuid()
    with contextlib.suppress(FileNotFoundError):
        for entry in os.listdir(directory):
            if matches(entry):
                path = os.path.join(directory, entry)
                with contextlib.suppress(FileNotFoundError):
                    st = os.lstat(path)
                    if stat.S_ISDIR(st.st_mode) or st.st_uid != me:
                        continue
                    os.unlink(path)


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def exchange(a: str, b: str) -> None:
    """Swap two existing paths in one step (Linux renameat2 RENAME_EXCHANGE): neither name is ever
    missing. OSError when the kernel, the C library or the file system cannot (then nothing moved)."""
    import ctypes

    faults.point("durable.exchange")
    libc = ctypes.CDLL(None, use_errno=True)
    func = getattr(libc, "renameat2", None)
    if func is None:
        raise OSError(errno.ENOSYS, "renameat2 is not in this C library")
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), a, None, b)
    fsync_dir(os.path.dirname(os.path.abspath(b)))


TOMBSTONE_MARK = ".storekit-deleting-"  # a directory being deleted; never a real name (layout check knows)


def is_tombstone(name: str) -> bool:
    return TOMBSTONE_MARK in name


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Delete a file or directory tree so that a crash never leaves it half-deleted under its name.

    The tree is first renamed to a hidden sibling tombstone and the rename made durable; only then
    are its contents removed. A crash leaves either the whole tree under its real name or a
    tombstone that `purge_tombstones` (or a rerun) removes. A missing path is not an error.
    """
    tomb = tombstone(path)
    if tomb is not None:
        remove_tombstone(tomb)


def tombstone(path: str | os.PathLike[str]) -> str | None:
    """Rename `path` to a hidden sibling tombstone, durably; its path, or None when `path` is missing."""
    directory, name = os.path.split(os.path.abspath(path))
    tomb = os.path.join(directory, f".{name}{TOMBSTONE_MARK}{uuid.uuid4().hex[:12]}")
    try:
        os.rename(path, tomb)
    except FileNotFoundError:
        return None
    fsync_dir(directory)
    faults.point("durable.tombstoned")
    return tomb


def purge_tombstones(directory: str | os.PathLike[str]) -> list[str]:
    """Remove the tombstones a crash left in `directory`; returns the names removed."""
    removed = []
    with os.scandir(directory) as entries:
        names = [e.name for e in entries if is_tombstone(e.name)]
    for name in names:
        remove_tombstone(os.path.join(directory, name))
        removed.append(name)
    return removed


def remove_tombstone(path: str) -> None:
    """Remove a tombstone's contents and itself; an OSError names the full path of what failed."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, onerror=_gone_is_fine)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _gone_is_fine(
    _func: object, failed: str, exc_info: tuple[type[BaseException], BaseException, object]
) -> None:
    """Two cleaners (a rerun and `layout clean`) may empty the same tombstone at once: gone is done."""
    exc = exc_info[1]
    if isinstance(exc, FileNotFoundError):
        return
    if isinstance(exc, OSError):  # rmtree's own error may name the entry relative to its directory
        raise OSError(exc.errno, exc.strerror, failed) from exc
    raise exc
