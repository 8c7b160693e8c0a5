"""POSIX directory trees: local disk, NFS, Lustre or CephFS mounts."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob as globmod
import os
import stat
from collections.abc import Iterator, Mapping
from typing import IO

from storekit.config import TierConfig
from storekit.diskspace import free_bytes
from storekit.durable import fsync_dir, remove_tombstone, tombstone
from storekit.errors import PathEscapeError, StorekitError, UnreachableError, not_regular, storage_error
from storekit.mounts import mount_mismatch
from storekit.paths import clean_rel, resolves_outside
from storekit.rootprobe import guard_root
from storekit.store.base import XATTR_PREFIX, Capabilities, Entry, Store, check_metadata, temp_name
from storekit.store.probe import posix_capabilities
from storekit.store.scan import ScanEntry, scan_tree


def require_mounted(tier: TierConfig, root: str) -> None:
    """A tier whose config names its mount (mount_type/mount_source) is down (exit 5) unless `root`
    is on that mount: an unmounted mount point is a directory of another disk, and whatever is
    written there fills that disk and is hidden once the file system is mounted over it."""
    wrong = mount_mismatch(root, tier.mount_type, tier.mount_source)
    if wrong is not None:
        raise UnreachableError(
            f"tier {tier.name} is down: {wrong}",
            hint=f"is it mounted? (mount_type/mount_source of [tiers.{tier.name}] say what it must be)",
        )


class PosixStore(Store):
    """A POSIX directory tree: local disk, NFS, Lustre or CephFS mounts. Plain OS calls throughout:
    no fsspec file system (importing fsspec costs every command ~40 ms)."""

    def __init__(self, tier: TierConfig, root: str) -> None:
        self.tier = tier
        self.root = root.rstrip("/") or "/"

    def probe_capabilities(self) -> Capabilities:
        return posix_capabilities(self.root)

    def full(self, rel: str) -> str:
        path = super().full(rel)
        self._refuse_symlink_escape(path)
        return path

    def _refuse_symlink_escape(self, path: str) -> None:
        # resolve the deepest existing ancestor: a symlink anywhere on the way must stay inside
        probe = path
        while not os.path.lexists(probe) and probe != self.root:
            probe = os.path.dirname(probe)
        real = resolves_outside(probe, self.root)
        if real is not None:
            raise PathEscapeError(
                f"{path} resolves to {real}, outside the root of tier {self.name} "
                f"({os.path.realpath(self.root)})",
                hint="a symlink inside the tier points out of it; storekit will not follow it",
            )

    def _full_nofollow(self, rel: str) -> str:
        """For operations on the entry itself (lstat, unlink): only its parents must resolve inside,
        so an escaping symlink can still be described and removed, never followed."""
        path = Store.full(self, rel)
        self._refuse_symlink_escape(os.path.dirname(path) if path != self.root else path)
        return path

    def open_read(self, rel: str, *, block_size: int | None = None) -> IO[bytes]:
        """The OS's own buffered reader (read-ahead is the kernel's), of a regular file only: a FIFO
        or a device is opened without blocking, seen for what it is and refused, never read."""
        full = self.full(rel)
        with self._errors(rel):
            fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                mode = os.fstat(fd).st_mode
                if not stat.S_ISREG(mode):
                    raise not_regular(full, mode)
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
                return os.fdopen(fd, "rb")
            except BaseException:
                os.close(fd)
                raise

    def local_path(self, rel: str) -> str:
        return self.full(rel)

    def probe(self) -> None:
        guard_root(self.root, self.name)  # first, on a shared mount: a stalled MDS must not hang us
        parent = os.path.dirname(self.root)
        if not os.path.isdir(self.root) and not os.path.isdir(parent):
            raise UnreachableError(
                f"tier {self.name}: {self.display_url} is not reachable ({parent} does not exist)",
                hint="is the filesystem mounted?",
            )
        require_mounted(self.tier, self.root)

    def _entry(self, full: str, st: os.stat_result, is_link: bool) -> Entry:
        return Entry(
            path=self.rel(full),
            size=st.st_size,
            mtime=st.st_mtime,
            is_dir=stat.S_ISDIR(st.st_mode),
            mode=stat.S_IMODE(st.st_mode),
            is_link=is_link,
        )

    def info(self, rel: str) -> Entry:
        full = self._full_nofollow(rel)
        with self._errors(rel):
            st = os.lstat(full)
        return self._entry(full, st, stat.S_ISLNK(st.st_mode))

    def glob(self, pattern: str) -> list[Entry]:
        full = self.full(pattern)
        out = []
        with self._errors(pattern):
            for path in globmod.glob(full, recursive=True, include_hidden=True):
                st = os.lstat(path)
                if not stat.S_ISDIR(st.st_mode):  # like list(): a link is an entry, never followed
                    out.append(self._entry(path, st, stat.S_ISLNK(st.st_mode)))
        return sorted(out, key=lambda e: e.path)

    def list(self, rel: str = "") -> list[Entry]:
        full = self.full(rel)
        out = []
        with self._errors(rel), os.scandir(full) as it:
            for de in it:
                st = de.stat(follow_symlinks=False)
                out.append(
                    self._entry(f"{full}/{de.name}" if full != "/" else f"/{de.name}", st, de.is_symlink())
                )
        return sorted(out, key=lambda e: e.path)

    def scan(self, rel: str = "") -> Iterator[ScanEntry]:
        rel = clean_rel(rel)
        full = self.full(rel)
        with self._errors(rel):
            yield from scan_tree(full, f"{rel}/" if rel else "")

    def free_space(self, rel: str = "") -> int | None:
        return free_bytes(self.full(rel))

    def get_metadata(self, rel: str) -> dict[str, str]:
        full = self.full(rel)
        with self._errors(rel):
            try:
                names = os.listxattr(full)
            except OSError as exc:
                if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
                    return {}
                raise
            return {
                n[len(XATTR_PREFIX) :]: os.getxattr(full, n).decode("utf-8")
                for n in names
                if n.startswith(XATTR_PREFIX)
            }

    @contextlib.contextmanager
    def atomic_writer(self, rel: str, *, metadata: Mapping[str, str] | None = None) -> Iterator[IO[bytes]]:
        meta = check_metadata(metadata)
        if meta and not self.capabilities.user_metadata:
            raise self._no_xattrs(rel, meta)
        final = self.full(rel)
        tmp = self.full(temp_name(clean_rel(rel)))
        created = _missing_dirs(self.root, final)
        with self._errors(rel):
            os.makedirs(os.path.dirname(final), exist_ok=True)
            fh = open(tmp, "wb")  # noqa: SIM115 -- closed below on every path
        try:
            with self._errors(rel):
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
                fh.close()
                for key, value in meta.items():
                    if not _set_xattr(tmp, XATTR_PREFIX + key, value.encode("utf-8")):
                        raise self._no_xattrs(rel, meta)  # a mount below the root without them
                os.replace(tmp, final)
                fsync_dir(os.path.dirname(final))
        except BaseException:
            fh.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            for path in created:  # deepest first; a directory someone else filled meanwhile stays
                with contextlib.suppress(OSError):
                    os.rmdir(path)
            raise

    def _no_xattrs(self, rel: str, meta: Mapping[str, str]) -> StorekitError:
        # refusing beats writing the file without the metadata the caller relies on
        return StorekitError(
            f"tier {self.name}: {self.display_url}/{rel} is on a file system without user xattrs, "
            f"so its metadata ({', '.join(sorted(meta))}) cannot be kept",
            hint="check store.capabilities.user_metadata and keep the metadata elsewhere (a manifest)",
        )

    def makedirs(self, rel: str, mode: int | None = None) -> None:
        full = self.full(rel)
        with self._errors(rel):
            os.makedirs(full, exist_ok=True)
            if mode is not None:
                os.chmod(full, mode)

    def chmod(self, rel: str, mode: int) -> None:
        with self._errors(rel):
            os.chmod(self.full(rel), mode)

    def delete(self, rel: str, *, recursive: bool = False) -> None:
        full = self._full_nofollow(rel)
        if full == self.root:
            raise PathEscapeError(f"refusing to delete the root of tier {self.name}")
        with self._errors(rel):
            st = os.lstat(full)
        if stat.S_ISDIR(st.st_mode) and recursive:
            self._delete_tree(full, rel)
            return
        try:
            if stat.S_ISDIR(st.st_mode):
                os.rmdir(full)
            else:
                os.unlink(full)
        except OSError as exc:
            # name the entry that could not be removed, not only the tree that was asked for
            inside = isinstance(exc.filename, str) and exc.filename.startswith(self.root.rstrip("/") + "/")
            with self._errors(self.rel(exc.filename) if inside else rel):
                raise

    def rename(self, src: str, dst: str) -> None:
        s, d = self.full(src), self.full(dst)
        with self._errors(dst):
            os.makedirs(os.path.dirname(d), exist_ok=True)
            os.rename(s, d)
            fsync_dir(os.path.dirname(d))

    def _delete_tree(self, full: str, rel: str) -> None:
        """Tombstone first (durable.remove_tree): a crash never leaves a half-deleted tree under its
        name; what a failure leaves stays in the tombstone, named by its old path."""
        with self._errors(rel):
            tomb = tombstone(full)
            if tomb is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), full)
        try:
            remove_tombstone(tomb)
        except OSError as exc:
            failed = exc.filename if isinstance(exc.filename, str) else tomb
            where = f"{self.display_url}/{self.rel(full + failed[len(tomb) :])}"
            err = storage_error(exc, where) or StorekitError(f"{where}: {exc.strerror}")
            raise type(err)(
                f"{err.message} (what is left is in the tombstone {self.display_url}/{self.rel(tomb)})",
                hint="fix the cause, then `storekit layout clean` removes the tombstone",
            ) from None


def _missing_dirs(root: str, final: str) -> list[str]:
    """Directories between `root` and the file `final` that do not exist yet, deepest first."""
    missing = []
    path = os.path.dirname(final)
    while len(path) > len(root) and not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return missing


def _set_xattr(path: str, name: str, value: bytes) -> bool:
    """False where the file system has no user xattrs."""
    try:
        os.setxattr(path, name, value)
    except OSError as exc:
        if exc.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        return False
    return True
