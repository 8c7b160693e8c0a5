"""Stores: one rooted view of a tier over fsspec, with the operations every command needs.

A POSIX mount (local NVMe, NFS, Lustre, CephFS) and an S3 endpoint (Ceph RGW) are both first-class.
What a backend cannot do is declared in `Capabilities` and callers check it instead of faking it:
S3 has no atomic rename, so directories are committed there by writing their manifest last.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import posixpath
import re
import shutil
import stat
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any, cast

import fsspec

from storekit.config import TierConfig, mask_url
from storekit.diskspace import free_bytes
from storekit.durable import TMP_MARK, fsync_dir
from storekit.errors import (
    InputError,
    NotFoundError,
    PathEscapeError,
    StorekitError,
    UnreachableError,
    exception_chain,
    is_retryable,
    storage_errors,
)
from storekit.paths import clean_rel, resolves_outside

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

    capabilities: Capabilities

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
    def list(self, rel: str = "") -> list[Entry]:
        """Immediate children of a directory, sorted by name."""

    def walk(self, rel: str = "") -> Iterator[Entry]:
        """Every entry below `rel`, depth first, parents before children, names sorted."""
        for entry in self.list(rel):
            yield entry
            if entry.is_dir and not entry.is_link:
                yield from self.walk(entry.path)

    @abstractmethod
    def free_space(self) -> int | None:
        """Bytes available to us, or None where the backend does not say."""

    @abstractmethod
    def get_metadata(self, rel: str) -> dict[str, str]: ...

    def local_path(self, rel: str) -> str | None:
        """An OS path for fast paths (O_DIRECT, mmap) where the tier is a POSIX mount."""
        return None

    # -- data ------------------------------------------------------------------------------------
    def open_read(self, rel: str) -> IO[bytes]:
        with self._errors(rel):
            return cast(IO[bytes], self.fs.open(self.full(rel), "rb"))

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


class PosixStore(Store):
    """A POSIX directory tree: local disk, NFS, Lustre or CephFS mounts."""

    capabilities = Capabilities(
        atomic_rename=True,
        directories=True,
        posix_modes=True,
        free_space=True,
        user_metadata=True,
        striping=bool(shutil.which("lfs")),
    )

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

    def local_path(self, rel: str) -> str:
        return self.full(rel)

    def probe(self) -> None:
        parent = os.path.dirname(self.root)
        if not os.path.isdir(self.root) and not os.path.isdir(parent):
            raise UnreachableError(
                f"tier {self.name}: {self.display_url} is not reachable ({parent} does not exist)",
                hint="is the filesystem mounted?",
            )

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

    def free_space(self) -> int | None:
        return free_bytes(self.root)

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
                    _set_xattr(tmp, XATTR_PREFIX + key, value.encode("utf-8"))
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
            if stat.S_ISDIR(st.st_mode):
                if recursive:
                    shutil.rmtree(full)
                else:
                    os.rmdir(full)
            else:
                os.unlink(full)

    def rename(self, src: str, dst: str) -> None:
        s, d = self.full(src), self.full(dst)
        with self._errors(dst):
            os.makedirs(os.path.dirname(d), exist_ok=True)
            os.rename(s, d)
            fsync_dir(os.path.dirname(d))


def _missing_dirs(root: str, final: str) -> list[str]:
    """Directories between `root` and the file `final` that do not exist yet, deepest first."""
    missing = []
    path = os.path.dirname(final)
    while len(path) > len(root) and not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return missing


def _set_xattr(path: str, name: str, value: bytes) -> None:
    try:
        os.setxattr(path, name, value)
    except OSError as exc:
        if exc.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP):
            raise


# Ceph RGW (Pacific) rejects the aws-chunked CRC trailers newer botocore sends by default, and
# a dead endpoint should fail in seconds, not minutes.
S3_DEFAULT_CONFIG: dict[str, Any] = {
    "s3": {"addressing_style": "path"},
    "request_checksum_calculation": "when_required",
    "response_checksum_validation": "when_required",
    "connect_timeout": 5,
    "read_timeout": 120,
    "retries": {"max_attempts": 3, "mode": "standard"},
}
S3_BLOCK_SIZE = 16 * 1024 * 1024


class S3Store(Store):
    """A bucket/prefix behind an S3 endpoint (Ceph RGW). Objects appear whole on PUT/complete."""

    capabilities = Capabilities(
        atomic_rename=False,
        directories=False,
        posix_modes=False,
        free_space=False,
        user_metadata=True,
        striping=False,
    )

    @property
    def bucket(self) -> str:
        return self.root.split("/", 1)[0]

    def probe(self) -> None:
        with self._errors(""):
            try:
                self.fs.info(self.bucket)
            except FileNotFoundError:
                raise NotFoundError(
                    f"tier {self.name}: bucket {self.bucket!r} does not exist at {self.endpoint}",
                    hint="create it (storekit init creates it) or fix the tier URL",
                ) from None

    @property
    def endpoint(self) -> str:
        return mask_url(str(self.tier.options.get("endpoint_url", "the default AWS endpoint")))

    @contextlib.contextmanager
    def _errors(self, rel: str) -> Iterator[None]:
        with super()._errors(rel):
            try:
                yield
            except Exception as exc:
                if isinstance(exc, StorekitError) or not is_retryable(exc):
                    raise
                raise UnreachableError(
                    f"tier {self.name}: cannot reach {self.endpoint} for {self.display_url}",
                    hint="check endpoint_url and that the gateway is up; then retry",
                ) from None

    def _entry(self, info: Mapping[str, Any]) -> Entry:
        is_dir = info.get("type") == "directory"
        mtime = info.get("LastModified") or info.get("mtime")
        ts = mtime.timestamp() if isinstance(mtime, datetime) else None
        return Entry(
            path=self.rel(str(info["name"])), size=int(info.get("size") or 0), mtime=ts, is_dir=is_dir
        )

    def info(self, rel: str) -> Entry:
        with self._errors(rel):
            return self._entry(self.fs.info(self.full(rel)))

    def _not_a_directory(self, rel: str) -> NotFoundError:
        return NotFoundError(f"{self.display_url}/{rel}: not a directory")

    def list(self, rel: str = "") -> list[Entry]:
        full = self.full(rel)
        with self._errors(rel):
            infos = self.fs.ls(full, detail=True, refresh=True)
        # `prefix/` directory-marker objects stand for the directory itself: not entries of their own
        out = [self._entry(i) for i in infos if not str(i["name"]).endswith("/") and str(i["name"]) != full]
        if not out and any(str(i["name"]) == full and i.get("type") == "file" for i in infos):
            raise self._not_a_directory(rel)  # ls of an object key answers with the object itself
        return sorted(out, key=lambda e: e.path)

    def walk(self, rel: str = "") -> Iterator[Entry]:
        # one paginated listing instead of a request per prefix
        full = self.full(rel)
        with self._errors(rel):
            infos = self.fs.find(full, withdirs=True, detail=True)
        entries = [self._entry(i) for name, i in infos.items() if not name.endswith("/") and name != full]
        if not entries and not self.info(rel).is_dir:  # info raises NotFoundError when nothing is there
            raise self._not_a_directory(rel)
        yield from sorted(entries, key=lambda e: e.path.split("/"))

    def open_read(self, rel: str) -> IO[bytes]:
        """A streaming reader pinned to the object's ETag: if the object is replaced while being read,
        reading raises a retryable error (exit 5) instead of returning bytes of two versions."""
        fh = super().open_read(rel)
        details = getattr(fh, "details", None) or {}
        if details.get("type") == "directory":  # s3fs would read a prefix as an empty file
            fh.close()
            raise self._is_a_directory(rel)
        cache = getattr(fh, "cache", None)
        if cache is not None and callable(getattr(cache, "fetcher", None)):
            cache.fetcher = self._guard_fetch(cache.fetcher, rel)
        return fh

    def read_bytes(self, rel: str) -> bytes:
        # one GET: a consistent copy of whichever version is current, even during an overwrite
        try:
            with self._errors(rel):
                return bytes(self.fs.cat_file(self.full(rel)))
        except NotFoundError:
            if self.exists(rel) and self.info(rel).is_dir:
                raise self._is_a_directory(rel) from None
            raise

    def _is_a_directory(self, rel: str) -> StorekitError:
        return StorekitError(f"{self.display_url}/{rel}: is a directory, not a file")

    def _guard_fetch(self, fetch: Any, rel: str) -> Any:
        def guarded(start: int, end: int) -> Any:
            try:
                return fetch(start, end)
            except Exception as exc:
                if _changed_while_reading(exc):
                    raise UnreachableError(
                        f"{self.display_url}/{rel} was replaced while it was being read",
                        hint="retry: the new version is complete, the read started on the old one",
                    ) from None
                with self._errors(rel):
                    raise

        return guarded

    def free_space(self) -> None:
        return None

    def get_metadata(self, rel: str) -> dict[str, str]:
        with self._errors(rel):
            head = self.fs.call_s3("head_object", Bucket=self.bucket, Key=self._key(rel))
        return {k: _decode_meta(v) for k, v in head.get("Metadata", {}).items()}

    def _key(self, rel: str) -> str:
        return self.full(rel).split("/", 1)[1] if "/" in self.full(rel) else ""

    @contextlib.contextmanager
    def atomic_writer(self, rel: str, *, metadata: Mapping[str, str] | None = None) -> Iterator[IO[bytes]]:
        meta = {k: _encode_meta(v) for k, v in check_metadata(metadata).items()}
        kwargs: dict[str, Any] = {"block_size": S3_BLOCK_SIZE}
        if meta:
            kwargs["Metadata"] = meta
        with self._errors(rel):
            fh = self.fs.open(self.full(rel), "wb", **kwargs)
        try:
            yield fh
            with self._errors(rel):
                if fh.tell() == 0:
                    # s3fs commits an empty file with touch(), which drops the metadata
                    _make_inert(fh)
                    self.fs.call_s3(
                        "put_object",
                        Bucket=self.bucket,
                        Key=self._key(rel),
                        Body=b"",
                        **({"Metadata": meta} if meta else {}),
                    )
                else:
                    fh.close()  # the single PUT, or completing the multipart upload: appears whole
        except BaseException:
            _make_inert(fh)  # aborts a started multipart upload: nothing appears, no parts stay behind
            raise

    def makedirs(self, rel: str, mode: int | None = None) -> None:
        """Buckets are created; prefixes get a zero-byte `prefix/` marker, as S3 consoles do."""
        rel = clean_rel(rel)
        with self._errors(rel):
            if not self.fs.exists(self.bucket):
                self.fs.mkdir(self.bucket)
            key = self._key(rel)
            if key:
                self.fs.call_s3("put_object", Bucket=self.bucket, Key=key + "/", Body=b"")

    def chmod(self, rel: str, mode: int) -> None:
        return None  # no permission bits on S3: Capabilities.posix_modes is False

    def delete(self, rel: str, *, recursive: bool = False) -> None:
        rel = clean_rel(rel)
        if not rel:
            raise PathEscapeError(f"refusing to delete the root of tier {self.name}")
        full, key = self.full(rel), self._key(rel)
        with self._errors(rel):
            kind = self.fs.info(full).get("type")  # FileNotFoundError -> NotFoundError (exit 3)
            if kind != "directory":
                self.fs.rm_file(full)
                return
            below = self.fs.find(full, withdirs=False)  # objects under `key/`, markers included
            if not recursive and any(p.rstrip("/") != full for p in below):
                raise StorekitError(
                    f"{self.display_url}/{rel}: directory not empty", hint="delete it recursively"
                )
            if below:
                self.fs.rm(below)
            with contextlib.suppress(FileNotFoundError):
                self.fs.call_s3("delete_object", Bucket=self.bucket, Key=key + "/")


def _make_inert(fh: Any) -> None:
    """Abort an S3 file being written and mark it closed, so that its __del__ does not try to
    flush a discarded buffer later ("'NoneType' object has no attribute 'tell'"). Also after a
    failed close: the multipart upload it may have left open is aborted, so no parts stay behind."""
    with contextlib.suppress(Exception):
        fh.discard()
    fh.closed = True


# S3 metadata travels in HTTP headers: ASCII only. Anything else is stored RFC 2047-encoded, the
# form AWS documents for non-ASCII metadata, and decoded again on read.
_RFC2047_PREFIX, _RFC2047_SUFFIX = "=?UTF-8?B?", "?="


def _encode_meta(value: str) -> str:
    plain = value.isascii() and value.isprintable() and value == value.strip()
    if plain and not value.startswith("=?"):
        return value
    return _RFC2047_PREFIX + base64.b64encode(value.encode("utf-8")).decode("ascii") + _RFC2047_SUFFIX


def _decode_meta(value: str) -> str:
    if value.startswith(_RFC2047_PREFIX) and value.endswith(_RFC2047_SUFFIX):
        with contextlib.suppress(ValueError):
            return base64.b64decode(value[len(_RFC2047_PREFIX) : -len(_RFC2047_SUFFIX)]).decode("utf-8")
    return value


def _changed_while_reading(exc: BaseException) -> bool:
    """The object's ETag no longer matches the one the read started with (HTTP 412). s3fs turns
    this into FileExpired, or, when the gateway sends no message (RGW), into a TypeError."""
    for e in exception_chain(exc):
        if type(e).__name__ == "FileExpired":
            return True
        response = getattr(e, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code") in (
            "PreconditionFailed",
            "412",
        ):
            return True
    return False


def s3_filesystem(options: Mapping[str, Any]) -> fsspec.AbstractFileSystem:
    opts = dict(options)
    config = {**S3_DEFAULT_CONFIG, **opts.pop("config_kwargs", {})}
    return fsspec.filesystem(
        "s3", config_kwargs=config, skip_instance_cache=True, use_listings_cache=False, **opts
    )


def open_store(tier: TierConfig) -> Store:
    """The store for a tier; nothing is contacted until the first operation (or `probe`)."""
    scheme = tier.scheme
    if scheme == "file":
        from urllib.parse import unquote, urlsplit

        root = os.path.normpath(unquote(urlsplit(tier.url).path))
        return PosixStore(tier, fsspec.filesystem("file"), root)
    if scheme == "s3":
        root = tier.url[len("s3://") :].rstrip("/")
        return S3Store(tier, s3_filesystem(tier.options), root)
    raise StorekitError(f"tier {tier.name}: unsupported URL scheme {scheme!r}")
