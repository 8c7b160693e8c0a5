"""What every store is: `Store` (one rooted view of a tier), its `Entry` and `Capabilities`.

A POSIX mount (local NVMe, NFS, Lustre, CephFS) and an S3 endpoint (Ceph RGW) are both first-class.
What a backend cannot do is declared in `Capabilities` and callers check it instead of faking it:
S3 has no atomic rename, so directories are committed there by writing their manifest last.
"""

from __future__ import annotations

import contextlib
import functools
import posixpath
import re
import stat
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, cast

from storekit.config import TierConfig, mask_url
from storekit.durable import TMP_MARK
from storekit.errors import (
    InputError,
    NotFoundError,
    PathEscapeError,
    StorekitError,
    storage_errors,
)
from storekit.paths import clean_rel
from storekit.store.scan import ScanEntry

if TYPE_CHECKING:  # fsspec is imported by the stores that use it (S3): ~40 ms of every command
    import fsspec

XATTR_PREFIX = "user.storekit."
# metadata keys every backend keeps as given: S3 lower-cases keys and RGW turns '_' into '-'
_META_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the store root, POSIX separators
    size: int
    mtime: float | None
    is_dir: bool
    mode: int | None = None  # permission bits (with sticky/setgid) where the backend has them
    is_link: bool = False

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


@dataclass(frozen=True)
class Capabilities:
    atomic_rename: bool  # rename is atomic: stage under a temp name, then rename
    directories: bool  # real directories (POSIX) rather than key prefixes (S3)
    posix_modes: bool  # permission bits, sticky bit
    free_space: bool  # statvfs-like free space is known
    user_metadata: bool  # small key/value metadata per file
    striping: bool  # Lustre `lfs setstripe` can be applied


def check_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """Validate user metadata: portable keys (lowercase letters, digits, '-'), string values."""
    out: dict[str, str] = {}
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not _META_KEY_RE.match(key):
            raise InputError(
                f"metadata key {key!r} is not portable",
                hint="use 1-64 lowercase letters, digits and '-' (S3 lower-cases keys, RGW rewrites '_')",
            )
        if not isinstance(value, str):
            raise InputError(f"metadata value for {key!r} must be a string, got {type(value).__name__}")
        out[key] = value
    return out


def temp_name(rel: str) -> str:
    """A sibling temp name for `rel` that layout check recognises as half-written."""
    head, tail = posixpath.split(rel)
    return posixpath.join(head, f".{tail}{TMP_MARK}{uuid.uuid4().hex[:12]}")


class Store(ABC):
    """A tier's root, seen through fsspec. All paths are relative to the root and validated."""

    def __init__(self, tier: TierConfig, fs: fsspec.AbstractFileSystem, root: str) -> None:
        self.tier = tier
        self.fs = fs
        self.root = root.rstrip("/") or "/"

    @property
    def name(self) -> str:
        return self.tier.name

    @property
    def display_url(self) -> str:
        return mask_url(self.tier.url)

    def full(self, rel: str) -> str:
        """The backend path for `rel`; refuses anything that would leave the root."""
        rel = clean_rel(rel)
        return self.root if not rel else f"{self.root.rstrip('/')}/{rel}"

    def rel(self, full: str) -> str:
        full = full.rstrip("/") or "/"  # a tier at the file system root (url = "file:///")
        if full == self.root:
            return ""
        prefix = self.root.rstrip("/") + "/"
        if not full.startswith(prefix):
            raise PathEscapeError(f"{full} is outside the root of tier {self.name} ({self.display_url})")
        return full[len(prefix) :]

    @functools.cached_property
    def capabilities(self) -> Capabilities:
        """What this store can do, probed once per instance (two POSIX tiers may differ)."""
        return self.probe_capabilities()

    @abstractmethod
    def probe_capabilities(self) -> Capabilities:
        """Find out what this store's backend can do, without writing anything."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.display_url}>"

    # -- queries ---------------------------------------------------------------------------------
    @abstractmethod
    def probe(self) -> None:
        """Raise UnreachableError (exit 5) when the tier cannot be reached at all."""

    @abstractmethod
    def info(self, rel: str) -> Entry: ...

    def exists(self, rel: str) -> bool:
        try:
            self.info(rel)
        except NotFoundError:
            return False
        return True

    @abstractmethod
    def glob(self, pattern: str) -> list[Entry]:
        """Files whose path below the root matches `pattern` (`*`, `?`, `[...]`; `**` spans
        directories), sorted; directories are not returned."""

    @abstractmethod
    def list(self, rel: str = "") -> list[Entry]:
        """Immediate children of a directory, sorted by name."""

    def walk(self, rel: str = "") -> Iterator[Entry]:
        """Every entry below `rel`, depth first, parents before children, names sorted."""
        for entry in self.list(rel):
            yield entry
            if entry.is_dir and not entry.is_link:
                yield from self.walk(entry.path)

    def scan(self, rel: str = "") -> Iterator[ScanEntry]:
        """Every entry below `rel` with what tier planning fingerprints, streamed in walk() order.
        Here from walk(): no ctime or inode (0), mtime to the backend's precision, no permission bits."""
        for e in self.walk(rel):
            kind = stat.S_IFDIR if e.is_dir else stat.S_IFLNK if e.is_link else stat.S_IFREG
            mtime_ns = round(e.mtime * 1e9) if e.mtime is not None else 0
            yield ScanEntry(e.path, e.size, mtime_ns, mtime_ns, 0, kind | (e.mode or 0))

    @abstractmethod
    def free_space(self, rel: str = "") -> int | None:
        """Bytes available to us at `rel` (or where it would be created), or None where the backend
        does not say."""

    @abstractmethod
    def get_metadata(self, rel: str) -> dict[str, str]: ...

    def local_path(self, rel: str) -> str | None:
        """An OS path for fast paths (O_DIRECT, mmap) where the tier is a POSIX mount."""
        return None

    # -- data ------------------------------------------------------------------------------------
    def open_read(self, rel: str, *, block_size: int | None = None) -> IO[bytes]:
        """A streaming reader; `block_size`: bytes a remote store fetches ahead per request."""
        ahead = {} if block_size is None else {"block_size": block_size, "cache_type": "readahead"}
        with self._errors(rel):
            return cast(IO[bytes], self.fs.open(self.full(rel), "rb", **ahead))

    def read_bytes(self, rel: str) -> bytes:
        with self.open_read(rel) as fh:
            return fh.read()

    @abstractmethod
    def atomic_writer(
        self, rel: str, *, metadata: Mapping[str, str] | None = None
    ) -> contextlib.AbstractContextManager[IO[bytes]]:
        """A file that appears under `rel` whole, or not at all if the block raises."""

    def write_bytes(self, rel: str, data: bytes, *, metadata: Mapping[str, str] | None = None) -> None:
        with self.atomic_writer(rel, metadata=metadata) as fh:
            fh.write(data)

    # -- namespace -------------------------------------------------------------------------------
    @abstractmethod
    def makedirs(self, rel: str, mode: int | None = None) -> None: ...

    @abstractmethod
    def chmod(self, rel: str, mode: int) -> None: ...

    @abstractmethod
    def delete(self, rel: str, *, recursive: bool = False) -> None: ...

    def rename(self, src: str, dst: str) -> None:
        raise StorekitError(f"tier {self.name} ({self.display_url}) has no atomic rename")

    # -- errors ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _errors(self, rel: str) -> Iterator[None]:
        """Turn backend exceptions into storekit errors that name the tier and path."""
        with storage_errors(f"{self.display_url}/{rel}".rstrip("/")):
            yield
