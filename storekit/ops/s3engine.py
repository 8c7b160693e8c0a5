"""The S3 transfer engine's core: one bucket's client, pool, limits and retries, and its types.

The operations live beside it (ops.s3upload, ops.s3download, ops.s3readback) and take an `S3Engine`;
callers use `storekit.ops.s3transfer.S3Transfer`, the engine with those operations as methods. (The
split keeps the imports one way: the operations import the core, the facade imports both.)


One engine holds one thread pool for all the files of a job (not a pool per file), a cap on the
bytes of parts in flight at once (memory = that cap), an optional bandwidth cap, and per-request
retries with a time budget. Uploads hash each file with xxh3-128 in the reading thread, in file
order; downloads hash the bytes they write, in file order, in the same pass. ETags are never used
as content digests (a multipart ETag is an MD5 of MD5s, and not even that under SSE).

Payload signing: `sign_payload=True` (the default, botocore's own choice over plain http) sends the
SHA-256 of every request body, which the gateway checks, at ~0.5 CPU-s/GB on the client;
`sign_payload=False` sends UNSIGNED-PAYLOAD (integrity then rests on the xxh3 read-back).
"""

from __future__ import annotations

import contextlib
import math
import mmap
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self, TypeVar

from storekit.config import URL_CREDENTIALS_HINT, TierConfig, mask_url
from storekit.errors import (
    PermissionDeniedError,
    StorekitError,
    UnreachableError,
    error_class,
    exception_chain,
    s3_error_code,
)
from storekit.ops import fadvise_dontneed as fadvise_dontneed  # where s3download and tier.dest find it
from storekit.ops.journal import UploadEntry, UploadJournal
from storekit.ops.throttle import ByteBudget, PartBuffers, TokenBucket
from storekit.store.retry import RetryBudgetExceeded, RetryPolicy, call_with_retries
from storekit.store.s3client import s3_client

if TYPE_CHECKING:
    from storekit.store.s3 import S3Store

T = TypeVar("T")
MiB = 1024 * 1024
S3_MAX_PARTS = 10_000
# an upload already completed or aborted: AWS answers NoSuchUpload, Ceph RGW NoSuchKey for list_parts
GONE_UPLOAD_CODES = ("NoSuchUpload", "NoSuchKey")
DIGEST_META_KEY = "storekit-xxh3-128"  # set only on objects whose digest was known before the PUT
WRONG_CREDENTIAL_CODES = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"})


@dataclass(frozen=True, kw_only=True)
class TransferConfig:
    threads: int = 8
    max_in_flight_bytes: int = 512 * MiB  # part bytes in flight at once (buffers or mapped pages), all files
    min_part_size: int = 64 * MiB
    max_parts: int = S3_MAX_PARTS  # lowered by tests to reach the ceiling with small files
    # ranged GETs (downloads, read-back): a 32 MiB body is mapped anew for each range (above glibc's
    # largest mmap threshold), 16 MiB ones reuse heap memory: ~0.5 client CPU-s/GB less measured here
    range_size: int = 16 * MiB
    bandwidth: float | None = None  # bytes/s for all threads together; None: no cap
    sign_payload: bool = True
    retry: RetryPolicy = field(default_factory=RetryPolicy)


def part_size_for(size: int, *, min_part_size: int, max_parts: int) -> int:
    """max(min_part_size, size / (95 % of max_parts)): the part-count ceiling is never reached,
    with 5 % slack (9,500 of 10,000 parts) so a slightly grown file still fits."""
    target = max(1, max_parts * 95 // 100)
    return max(min_part_size, math.ceil(size / target))


# Linux: the pages are made in one call rather than faulted in one by one as the body arrives, about
# half the CPU of filling a buffer the first time, and of freeing it (measured, benchmarks/RESULTS.md #36)
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def anonymous_map(size: int) -> mmap.mmap:
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _POPULATE)


def tier_bucket_prefix(tier: TierConfig) -> tuple[str, str]:
    """`s3://bucket/some/prefix` -> ("bucket", "some/prefix")."""
    bucket, _, prefix = tier.url[len("s3://") :].strip("/").partition("/")
    return bucket, prefix


@dataclass(frozen=True)
class UploadItem:
    path: str  # local file
    key: str
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class UploadResult:
    key: str
    size: int
    xxh3_128: str  # of the bytes read from the source, computed in the reading pass
    parts: int  # 0: a single PUT
    reused_parts: int  # parts of a journaled upload found intact and not sent again
    digest_in_metadata: bool


@dataclass(frozen=True)
class DownloadItem:
    key: str
    path: str  # local destination; appears whole (temp + fsync + rename + directory fsync)
    expected_xxh3_128: str | None = None  # checked before the rename: a bad copy never appears


@dataclass(frozen=True)
class DownloadResult:
    key: str
    path: str
    size: int
    xxh3_128: str  # of the bytes written, computed in order in the same pass


class S3Engine:
    """One bucket's client, thread pool and limits, shared by every upload and download of a job."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        *,
        config: TransferConfig | None = None,
        journal: UploadJournal | None = None,
        endpoint: str = "",
        bandwidth: TokenBucket | None = None,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.config = config or TransferConfig()
        self.journal = journal
        self.endpoint = mask_url(endpoint) if endpoint else "the S3 endpoint"
        self.budget = ByteBudget(self.config.max_in_flight_bytes)
        # downloads' ranges: page-aligned (anonymous maps), as O_DIRECT writes need
        self.range_buffers = PartBuffers(self.config.max_in_flight_bytes, alloc=anonymous_map)
        # one bucket for every thread; `bandwidth` lets a test give it an injected clock
        self.bandwidth = bandwidth or (TokenBucket(self.config.bandwidth) if self.config.bandwidth else None)
        self.pool = ThreadPoolExecutor(self.config.threads, thread_name_prefix="storekit-s3")

    @classmethod
    def for_tier(
        cls, tier: TierConfig, *, config: TransferConfig | None = None, journal: UploadJournal | None = None
    ) -> Self:
        config = config or TransferConfig()
        client = s3_client(tier.options, max_pool=config.threads + 2, sign_payload=config.sign_payload)
        bucket, _ = tier_bucket_prefix(tier)
        endpoint = str(tier.options.get("endpoint_url", ""))
        return cls(client, bucket, config=config, journal=journal, endpoint=endpoint)

    @classmethod
    def for_store(
        cls, store: S3Store, *, config: TransferConfig | None = None, journal: UploadJournal | None = None
    ) -> Self:
        """On the store's bucket and endpoint: a client of the engine's own, its pool sized for the
        engine's threads, payloads signed as `config` says (a tier move's: unsigned)."""
        config = config or TransferConfig()
        client = s3_client(store.tier.options, max_pool=config.threads + 2, sign_payload=config.sign_payload)
        endpoint = str(store.tier.options.get("endpoint_url", ""))
        return cls(client, store.bucket, config=config, journal=journal, endpoint=endpoint)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- shared plumbing ---------------------------------------------------------------------------
    def call(self, what: str, fn: Callable[[], T]) -> T:
        """`fn()` with the engine's retries; a spent budget is exit 5 naming the endpoint and object."""
        try:
            return call_with_retries(fn, policy=self.config.retry)
        except RetryBudgetExceeded as exc:
            raise UnreachableError(
                f"{what}: {self.endpoint} kept failing for the whole retry budget "
                f"({self.config.retry.budget_s:.0f} s)",
                hint="check the gateway; a rerun resumes journaled uploads",
            ) from exc
        except Exception as exc:
            code = s3_error_code(exc)
            if code is None:
                if not any(type(e).__name__ == "NoCredentialsError" for e in exception_chain(exc)):
                    raise
                # botocore found none before sending anything: one line naming the tier, not a traceback
                raise PermissionDeniedError(
                    f"{what}: no credentials for {self.endpoint}", hint=URL_CREDENTIALS_HINT
                ) from None
            if code in WRONG_CREDENTIAL_CODES:
                raise PermissionDeniedError(
                    f"{what}: wrong credentials for {self.endpoint} ({code})", hint=URL_CREDENTIALS_HINT
                ) from exc
            cls = error_class(exc) or StorekitError  # e.g. AccessDenied: exit 1, retrying cannot fix it
            raise cls(f"{what}: {self.endpoint} answered {code}") from exc

    def throttle(self, n: int) -> None:
        if self.bandwidth is not None:
            self.bandwidth.take(n)

    def part_size(self, size: int) -> int:
        return part_size_for(size, min_part_size=self.config.min_part_size, max_parts=self.config.max_parts)

    # -- journaled uploads --------------------------------------------------------------------------
    def abort_journaled(self) -> list[str]:
        """Abort exactly the uploads the journal names (and nothing else); returns their keys."""
        if self.journal is None:
            return []
        done = []
        for entry in self.journal.entries():
            if entry.bucket != self.bucket:
                continue
            for upload_id in self.journaled_upload_ids(entry):
                with contextlib.suppress(NoSuchUpload):
                    self.abort(entry.key, upload_id)
            self.journal.forget(entry.bucket, entry.key)
            done.append(entry.key)
        return done

    def journaled_upload_ids(self, entry: UploadEntry) -> list[str]:
        if entry.upload_id is not None:
            return [entry.upload_id]
        # killed between sending create_multipart_upload and recording its answer: the uploads of
        # exactly this key started since the intent was written (5 min of clock skew allowed)
        found = self.call(
            f"list uploads of {self.bucket}/{entry.key}",
            lambda: self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=entry.key),
        )
        return [
            u["UploadId"]
            for u in found.get("Uploads", [])
            if u["Key"] == entry.key and u["Initiated"].timestamp() >= entry.started - 300
        ]

    def call_on_upload(self, what: str, key: str, fn: Callable[[], T]) -> T:
        """`call` on a multipart upload of `key`: one completed or aborted already is NoSuchUpload."""
        try:
            return self.call(what, fn)
        except Exception as exc:
            if s3_error_code(exc) in GONE_UPLOAD_CODES:
                raise NoSuchUpload(key) from exc
            raise

    def abort(self, key: str, upload_id: str) -> None:
        self.call_on_upload(
            f"abort upload of {self.bucket}/{key}",
            key,
            lambda: self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id),
        )


class NoSuchUpload(StorekitError):
    """The journaled upload no longer exists on the gateway (completed or aborted already)."""
