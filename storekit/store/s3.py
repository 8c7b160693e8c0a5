"""A bucket/prefix behind an S3 endpoint (Ceph RGW), on storekit's one botocore client (store.s3client).

Every request goes through `S3Store.call`: the one retry rule (store.retry) with the store's short
budget, so a dead endpoint is exit 5 in seconds. Listing is list_objects_v2 paging (a `/` delimiter
for list, none for walk and glob), info a HEAD, reads ranged GETs pinned to the ETag, writes one PUT
or a multipart upload whose parts grow (part_size), deletes DeleteObjects with every key's answer
checked (store.s3delete).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import re
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import IO, Any, NoReturn, TypeVar, cast

from storekit.config import URL_CREDENTIALS_HINT, TierConfig, mask_url
from storekit.errors import (
    DENIED_CODES,
    NotFoundError,
    PathEscapeError,
    PermissionDeniedError,
    StorekitError,
    UnreachableError,
    exception_chain,
    is_retryable,
    s3_error_code,
)
from storekit.paths import clean_rel
from storekit.store.base import Capabilities, Entry, Store, check_metadata
from storekit.store.retry import STORE_RETRY, RetryPolicy, call_with_retries
from storekit.store.s3client import s3_client
from storekit.store.s3delete import delete_keys

S3_BLOCK_SIZE = 16 * 1024 * 1024
S3_READ_AHEAD = 16 * 1024 * 1024  # bytes a reader fetches per GET when the caller names no block size
T = TypeVar("T")
S3_MAX_PARTS = 10_000  # parts per multipart upload: S3's ceiling, also RGW's
_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})
_DENIED_WHY = {
    "RequestTimeTooSkewed": "this host's clock is too far from the gateway's",
    "ExpiredToken": "the session token has expired",
}
_GLOB_MAGIC = re.compile(r"[*?\[]")


class S3Store(Store):
    """A bucket/prefix behind an S3 endpoint (Ceph RGW). Objects appear whole on PUT/complete."""

    block_size = S3_BLOCK_SIZE  # the first parts of a streamed upload
    max_parts = S3_MAX_PARTS  # tests lower both on an instance to reach the ceiling with small files

    def __init__(self, tier: TierConfig, root: str, client: Any = None) -> None:
        # no Store.__init__: there is no fsspec file system behind this store
        self.tier = tier
        self.root = root.rstrip("/") or "/"
        self.retry: RetryPolicy = STORE_RETRY
        if client is not None:
            self.client = client

    @functools.cached_property
    def client(self) -> Any:
        """The botocore client, made on first use: opening a store contacts nothing."""
        return s3_client(self.tier.options)

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """`fn()` under the one retry rule; the caller's `_errors` names the tier and path."""
        return call_with_retries(fn, policy=self.retry)

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
            if not self._bucket_exists():
                raise NotFoundError(
                    f"tier {self.name}: bucket {self.bucket!r} does not exist at {self.endpoint}",
                    hint="create it (storekit init creates it) or fix the tier URL",
                )

    def _bucket_exists(self) -> bool:
        try:
            self.call("head bucket", lambda: self.client.head_bucket(Bucket=self.bucket))
        except Exception as exc:
            code = s3_error_code(exc)
            if code in (*_MISSING_CODES, "NoSuchBucket"):
                return False
            if code in DENIED_CODES:  # a HEAD answer has no body: "403" alone would tell nothing
                why = _DENIED_WHY.get(str(code), "a wrong key or secret, or keys without access to it")
                raise PermissionDeniedError(
                    f"tier {self.name}: {self.endpoint} refused access to bucket {self.bucket!r} "
                    f"(HTTP 403 {code if code != '403' else 'Forbidden'}): {why}",
                    hint=URL_CREDENTIALS_HINT,
                ) from None
            raise
        return True

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

    # -- keys and listings -------------------------------------------------------------------------
    def key(self, rel: str) -> str:
        """The object key of `rel`: the root's prefix and `rel`, checked never to leave the root."""
        return self._key(rel)

    def _key(self, rel: str) -> str:
        return self.full(rel).split("/", 1)[1] if "/" in self.full(rel) else ""

    def _rel_of(self, key: str) -> str:
        return self.rel(f"{self.bucket}/{key.rstrip('/')}")

    def _file(self, key: str, size: Any, mtime: Any) -> Entry:
        ts = mtime.timestamp() if isinstance(mtime, datetime) else None
        return Entry(path=self._rel_of(key), size=int(size or 0), mtime=ts, is_dir=False)

    def _dir(self, key: str) -> Entry:
        return Entry(path=self._rel_of(key), size=0, mtime=None, is_dir=True)

    def _pages(self, prefix: str, delimiter: str = "") -> Iterator[dict[str, Any]]:
        """list_objects_v2 of `prefix`, page by page (1,000 keys each)."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        while True:
            page: dict[str, Any] = self.call(f"list {prefix}", functools.partial(self._list, dict(kwargs)))
            yield page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            kwargs["ContinuationToken"] = token

    def _list(self, kwargs: dict[str, Any]) -> Any:
        return self.client.list_objects_v2(**kwargs)

    def _objects(self, prefix: str) -> Iterator[dict[str, Any]]:
        for page in self._pages(prefix):
            yield from page.get("Contents", [])

    def _head(self, key: str) -> dict[str, Any] | None:
        """The object's HEAD answer; None where no object has this key."""
        if not key:
            return None
        try:
            head: dict[str, Any] = self.call(
                f"head {key}", lambda: self.client.head_object(Bucket=self.bucket, Key=key)
            )
        except Exception as exc:
            if s3_error_code(exc) in _MISSING_CODES:
                return None
            raise
        return head

    def _is_dir(self, key: str) -> bool:
        """Something is stored below `key/` (a marker or objects); the bucket itself always is one."""
        if not key:
            if not self._bucket_exists():
                self._missing(key)
            return True
        page = self.call(
            f"list {key}/",
            lambda: self.client.list_objects_v2(
                Bucket=self.bucket, Prefix=key + "/", Delimiter="/", MaxKeys=1
            ),
        )
        return bool(page.get("Contents") or page.get("CommonPrefixes"))

    def _missing(self, key: str) -> NoReturn:
        raise FileNotFoundError(f"{self.bucket}/{key}")  # _errors: NotFoundError (exit 3) naming the path

    def info(self, rel: str) -> Entry:
        key = self._key(rel)
        with self._errors(rel):
            head = self._head(key)
            if head is not None:
                return self._file(key, head.get("ContentLength"), head.get("LastModified"))
            if self._is_dir(key):
                return Entry(path=clean_rel(rel), size=0, mtime=None, is_dir=True)
            self._missing(key)

    def _not_a_directory(self, rel: str) -> NotFoundError:
        return NotFoundError(f"{self.display_url}/{rel}: not a directory")

    def glob(self, pattern: str) -> list[Entry]:
        from fsspec.utils import glob_translate  # fsspec's glob rules, as the POSIX store's

        self.full(pattern)  # refuses a pattern that leaves the root
        rel_pattern = clean_rel(pattern)
        parts = rel_pattern.split("/")
        literal = []
        for part in parts[:-1]:  # the directories before the first wildcard: the prefix to list
            if _GLOB_MAGIC.search(part):
                break
            literal.append(part)
        base = self._key("/".join(literal))
        match = re.compile(glob_translate(rel_pattern)).match
        with self._errors(pattern):
            files = [
                self._file(o["Key"], o.get("Size"), o.get("LastModified"))
                for o in self._objects(base + "/" if base else "")
                if not o["Key"].endswith("/")
            ]
        return sorted((e for e in files if match(e.path)), key=lambda e: e.path)

    def list(self, rel: str = "") -> list[Entry]:
        key = self._key(rel)
        prefix = key + "/" if key else ""
        out: list[Entry] = []
        seen = False
        with self._errors(rel):
            for page in self._pages(prefix, "/"):
                for obj in page.get("Contents", []):
                    seen = True
                    # a `prefix/` directory marker stands for the directory itself: not an entry
                    if obj["Key"] != prefix and not obj["Key"].endswith("/"):
                        out.append(self._file(obj["Key"], obj.get("Size"), obj.get("LastModified")))
                for sub in page.get("CommonPrefixes", []):
                    seen = True
                    out.append(self._dir(sub["Prefix"]))
            if not seen and key:
                if self._head(key) is not None:
                    raise self._not_a_directory(rel)
                self._missing(key)
        return sorted(out, key=lambda e: e.path)

    def walk(self, rel: str = "") -> Iterator[Entry]:
        # one paginated listing instead of a request per prefix; directories from the keys' paths
        key = self._key(rel)
        prefix = key + "/" if key else ""
        entries: dict[str, Entry] = {}
        with self._errors(rel):
            for obj in self._objects(prefix):
                below = obj["Key"][len(prefix) :]
                if not below:
                    continue  # the marker of `rel` itself
                names = below.rstrip("/").split("/")
                for depth in range(1, len(names)):
                    sub = prefix + "/".join(names[:depth])
                    if sub not in entries:
                        entries[sub] = self._dir(sub)
                if obj["Key"].endswith("/"):
                    entries.setdefault(obj["Key"].rstrip("/"), self._dir(obj["Key"]))
                else:
                    entries[obj["Key"]] = self._file(obj["Key"], obj.get("Size"), obj.get("LastModified"))
        if not entries and not self.info(rel).is_dir:  # info raises NotFoundError when nothing is there
            raise self._not_a_directory(rel)
        yield from sorted(entries.values(), key=lambda e: e.path.split("/"))

    # -- data ------------------------------------------------------------------------------------
    def open_read(self, rel: str, *, block_size: int | None = None) -> IO[bytes]:
        """A streaming reader pinned to the object's ETag: if the object is replaced while being read,
        reading raises a retryable error (exit 5) instead of returning bytes of two versions.
        Ranged GETs of `block_size` (read-ahead); one larger read is one GET."""
        key = self._key(rel)
        with self._errors(rel):
            head = self._head(key)
            if head is None:
                if self._is_dir(key):
                    raise self._is_a_directory(rel)
                self._missing(key)
        size = int(head["ContentLength"])
        raw = _ObjectReader(self, rel, key, size, str(head["ETag"]))
        ahead = max(1, min(block_size or S3_READ_AHEAD, size))
        return cast(IO[bytes], io.BufferedReader(raw, buffer_size=ahead))

    def read_bytes(self, rel: str) -> bytes:
        # one GET: a consistent copy of whichever version is current, even during an overwrite
        key = self._key(rel)
        try:
            with self._errors(rel):
                if not key:
                    raise self._is_a_directory(rel)
                return self.call(f"get {key}", lambda: _whole_body(self.client, self.bucket, key))
        except NotFoundError:
            if self.exists(rel) and self.info(rel).is_dir:
                raise self._is_a_directory(rel) from None
            raise

    def _is_a_directory(self, rel: str) -> StorekitError:
        return StorekitError(f"{self.display_url}/{rel}: is a directory, not a file")

    def _get_range(self, rel: str, key: str, etag: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the version whose ETag is `etag`."""

        def get() -> bytes:
            resp = self.client.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end - 1}", IfMatch=etag
            )
            data: bytes = resp["Body"].read()
            if len(data) != end - start:
                raise _ShortBody(f"{len(data)} of {end - start} bytes at offset {start}")
            return data

        with self._errors(rel):
            try:
                return self.call(f"get {key}", get)
            except Exception as exc:
                if _changed_while_reading(exc):
                    raise UnreachableError(
                        f"{self.display_url}/{rel} was replaced while it was being read",
                        hint="retry: the new version is complete, the read started on the old one",
                    ) from None
                raise

    def free_space(self, rel: str = "") -> None:
        self.full(rel)  # a path outside the root is refused here as everywhere
        return None

    def get_metadata(self, rel: str) -> dict[str, str]:
        key = self._key(rel)
        with self._errors(rel):
            head = self._head(key)
            if head is None:
                self._missing(key)
        return decode_s3_metadata(head.get("Metadata", {}))

    @contextlib.contextmanager
    def atomic_writer(self, rel: str, *, metadata: Mapping[str, str] | None = None) -> Iterator[IO[bytes]]:
        meta = encode_s3_metadata(metadata)
        fh = _ObjectWriter(self, rel, self._key(rel), meta)
        try:
            yield cast(IO[bytes], fh)
            fh.close()  # the single PUT, or completing the multipart upload: appears whole
        except BaseException:
            fh.abort()  # aborts a started multipart upload: nothing appears, no parts stay behind
            raise

    def makedirs(self, rel: str, mode: int | None = None) -> None:
        """Buckets are created; prefixes get a zero-byte `prefix/` marker, as S3 consoles do."""
        rel = clean_rel(rel)
        with self._errors(rel):
            if not self._bucket_exists():
                self.call("create bucket", lambda: self.client.create_bucket(Bucket=self.bucket))
            key = self._key(rel)
            if key:
                self.call(
                    f"put {key}/", lambda: self.client.put_object(Bucket=self.bucket, Key=key + "/", Body=b"")
                )

    def chmod(self, rel: str, mode: int) -> None:
        return None  # no permission bits on S3: Capabilities.posix_modes is False

    def delete(self, rel: str, *, recursive: bool = False) -> None:
        rel = clean_rel(rel)
        if not rel:
            raise PathEscapeError(f"refusing to delete the root of tier {self.name}")
        key = self._key(rel)
        with self._errors(rel):
            if self._head(key) is not None:
                delete_keys(self, [key])  # its answer checked, listed again: gone, or DeleteFailed
                return
            below = [o["Key"] for o in self._objects(key + "/")]  # markers included
            if not below:
                self._missing(key)  # NotFoundError (exit 3)
            if not recursive and any(k.rstrip("/") != key for k in below):
                raise StorekitError(
                    f"{self.display_url}/{rel}: directory not empty", hint="delete it recursively"
                )
            delete_keys(self, below)  # every key's answer checked, the keys listed again


class _ShortBody(ConnectionError):
    """The gateway sent fewer bytes than asked for (a dropped connection): retryable."""


def _whole_body(client: Any, bucket: str, key: str) -> bytes:
    resp = client.get_object(Bucket=bucket, Key=key)
    data: bytes = resp["Body"].read()
    if len(data) != int(resp.get("ContentLength", len(data))):
        raise _ShortBody(f"{len(data)} of {resp['ContentLength']} bytes")
    return data


class _ObjectReader(io.RawIOBase):
    """One object version read with ranged GETs (If-Match its ETag); BufferedReader reads ahead."""

    def __init__(self, store: S3Store, rel: str, key: str, size: int, etag: str) -> None:
        super().__init__()
        self.store, self.rel_path, self.key, self.size, self.etag = store, rel, key, size, etag
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self.pos = base + offset
        return self.pos

    def _fetch(self, n: int) -> bytes:
        end = min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        data = self.store._get_range(self.rel_path, self.key, self.etag, self.pos, end)
        self.pos = end
        return data

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._fetch(len(view))
        view[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        return self._fetch(self.size - self.pos)


class _ObjectWriter(io.RawIOBase):
    """A streamed upload: one PUT when everything fits the first part, else a multipart upload
    whose parts grow with S3Store.part_size (a part goes up once the buffer reaches that size)."""

    def __init__(self, store: S3Store, rel: str, key: str, meta: dict[str, str]) -> None:
        super().__init__()
        self.store, self.rel_path, self.key, self.meta = store, rel, key, meta
        self.buffer = bytearray()
        self.written = 0
        self.upload_id: str | None = None
        self.parts: list[dict[str, Any]] = []
        self.done = False  # committed or aborted: close() (also from __del__) sends nothing more

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.written

    def write(self, data: Any) -> int:
        if self.closed or self.done:
            raise ValueError("write to a closed S3 object writer")
        n = len(memoryview(data).cast("B"))
        self.buffer += data
        self.written += n
        if len(self.buffer) >= self.store.part_size(len(self.parts)):
            self._send_part()
        return n

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        with self.store._errors(self.rel_path):
            return self.store.call(what, fn)

    def _send_part(self) -> None:
        store, bucket, key = self.store, self.store.bucket, self.key
        if self.upload_id is None:
            extra = {"Metadata": self.meta} if self.meta else {}
            reply = self._call(
                f"start upload of {key}",
                lambda: store.client.create_multipart_upload(Bucket=bucket, Key=key, **extra),
            )
            self.upload_id = str(reply["UploadId"])
        body, number, upload_id = bytes(self.buffer), len(self.parts) + 1, self.upload_id
        self.buffer = bytearray()
        reply = self._call(
            f"upload part {number} of {key}",
            lambda: store.client.upload_part(
                Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
            ),
        )
        self.parts.append({"PartNumber": number, "ETag": reply["ETag"]})

    def __del__(self) -> None:
        # dropped without close() or abort(): nothing may appear (IOBase's __del__ would commit)
        if not self.done:
            self.abort()

    def close(self) -> None:
        if not self.done and not self.closed:
            self.done = True
            try:
                self._commit()
            except BaseException:
                self._abort()
                raise
        super().close()

    def _commit(self) -> None:
        store, bucket, key = self.store, self.store.bucket, self.key
        if self.upload_id is None:  # everything fits one PUT (an empty object too, metadata kept)
            body, extra = bytes(self.buffer), {"Metadata": self.meta} if self.meta else {}
            self._call(
                f"put {key}", lambda: store.client.put_object(Bucket=bucket, Key=key, Body=body, **extra)
            )
            return
        if self.buffer:
            self._send_part()
        upload_id, parts = self.upload_id, {"Parts": self.parts}
        self._call(
            f"complete upload of {key}",
            lambda: store.client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload=parts
            ),
        )

    def abort(self) -> None:
        """Nothing appears; a started multipart upload is aborted, so no parts stay behind."""
        self.done = True
        self._abort()
        super().close()

    def _abort(self) -> None:
        self.buffer = bytearray()
        if self.upload_id is not None:
            upload_id, self.upload_id = self.upload_id, None
            with contextlib.suppress(Exception):
                self.store.client.abort_multipart_upload(
                    Bucket=self.store.bucket, Key=self.key, UploadId=upload_id
                )


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
    """The object's ETag no longer matches the one the read started with (HTTP 412; RGW sends the
    status without a code)."""
    return any(s3_error_code(e) in ("PreconditionFailed", "412") for e in exception_chain(exc))
