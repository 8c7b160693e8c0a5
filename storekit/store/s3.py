"""A bucket/prefix behind an S3 endpoint (Ceph RGW) through s3fs."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any, TypeVar

from storekit.config import mask_url
from storekit.errors import (
    NotFoundError,
    PathEscapeError,
    StorekitError,
    UnreachableError,
    exception_chain,
    is_retryable,
)
from storekit.paths import clean_rel
from storekit.store.base import Capabilities, Entry, Store, check_metadata

if TYPE_CHECKING:
    import fsspec

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
T = TypeVar("T")
S3_MAX_PARTS = 10_000  # parts per multipart upload: S3's ceiling, also RGW's


class S3Store(Store):
    """A bucket/prefix behind an S3 endpoint (Ceph RGW). Objects appear whole on PUT/complete."""

    block_size = S3_BLOCK_SIZE  # the first parts of a streamed upload
    max_parts = S3_MAX_PARTS  # tests lower both on an instance to reach the ceiling with small files

    def part_size(self, parts_done: int) -> int:
        """The size of the next part of a streamed upload, whose final size is unknown: it doubles
        every tenth of max_parts, so 10,000 parts hold 16 TiB (S3's largest object is 5 TiB)
        where fixed 16 MiB parts would stop at 156 GiB."""
        step = max(1, self.max_parts // 10)
        return int(self.block_size << min(parts_done // step, 9))

    def probe_capabilities(self) -> Capabilities:
        # the S3 API fixes these for every gateway: nothing to ask the endpoint
        return Capabilities(
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

    def glob(self, pattern: str) -> list[Entry]:
        full = self.full(pattern)
        with self._errors(pattern):
            infos = self.fs.glob(full, detail=True)
        files = [self._entry(i) for name, i in infos.items() if i.get("type") != "directory"]
        return sorted((e for e in files if not e.path.endswith("/")), key=lambda e: e.path)

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

    def open_read(self, rel: str, *, block_size: int | None = None) -> IO[bytes]:
        """A streaming reader pinned to the object's ETag: if the object is replaced while being read,
        reading raises a retryable error (exit 5) instead of returning bytes of two versions."""
        fh = super().open_read(rel, block_size=block_size)
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
        return decode_s3_metadata(head.get("Metadata", {}))

    def _key(self, rel: str) -> str:
        return self.full(rel).split("/", 1)[1] if "/" in self.full(rel) else ""

    @contextlib.contextmanager
    def atomic_writer(self, rel: str, *, metadata: Mapping[str, str] | None = None) -> Iterator[IO[bytes]]:
        meta = encode_s3_metadata(metadata)
        kwargs: dict[str, Any] = {"block_size": self.part_size(0)}
        if meta:
            kwargs["Metadata"] = meta
        with self._errors(rel):
            fh = self.fs.open(self.full(rel), "wb", **kwargs)
        self._grow_parts(fh)
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

    def _grow_parts(self, fh: Any) -> None:
        """After each part s3fs sends, set the size of the next (s3fs sends one part per flush of
        a full buffer, the buffer being `blocksize`)."""
        upload = fh._upload_chunk

        def upload_then_grow(final: bool = False) -> Any:
            result = upload(final=final)
            fh.blocksize = self.part_size(len(fh.parts or []))
            return result

        fh._upload_chunk = upload_then_grow

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
                # per-key answers checked and the keys listed again: s3fs's rm ignores refusals
                from storekit.ops.s3delete import delete_keys

                delete_keys(_StoreCalls(self), [p[len(self.bucket) + 1 :] for p in below])
            with contextlib.suppress(FileNotFoundError):
                self.fs.call_s3("delete_object", Bucket=self.bucket, Key=key + "/")


class _StoreCalls:
    """The store's s3fs client in the shape ops.s3delete works with (boto3-style calls)."""

    def __init__(self, store: S3Store) -> None:
        self.bucket, self.endpoint, self._fs = store.bucket, store.endpoint, store.fs
        self.client = self

    def delete_objects(self, **kwargs: Any) -> Any:
        return self._fs.call_s3("delete_objects", **kwargs)

    def list_objects_v2(self, **kwargs: Any) -> Any:
        return self._fs.call_s3("list_objects_v2", **kwargs)

    def call(self, what: str, fn: Callable[[], T]) -> T:
        return fn()  # s3fs retries; the store's _errors names the tier and path


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


def encode_s3_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """User metadata checked (`check_metadata`) and encoded for S3 headers: what every PUT sends."""
    return {k: _encode_value(v) for k, v in check_metadata(metadata).items()}


def decode_s3_metadata(headers: Mapping[str, str]) -> dict[str, str]:
    """User metadata as `encode_s3_metadata` was given it, from a HEAD's `Metadata`."""
    return {k: _decode_value(v) for k, v in headers.items()}


def _encode_value(value: str) -> str:
    plain = value.isascii() and value.isprintable() and value == value.strip()
    if plain and not value.startswith("=?"):
        return value
    return _RFC2047_PREFIX + base64.b64encode(value.encode("utf-8")).decode("ascii") + _RFC2047_SUFFIX


def _decode_value(value: str) -> str:
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
    import fsspec

    opts = dict(options)
    config = {**S3_DEFAULT_CONFIG, **opts.pop("config_kwargs", {})}
    return fsspec.filesystem(
        "s3", config_kwargs=config, skip_instance_cache=True, use_listings_cache=False, **opts
    )
