"""The one S3 transfer engine: files up and down over botocore with shared limits.

One engine holds one thread pool for all the files of a job (not a pool per file), a cap on the
bytes of parts in flight at once (memory = that cap), an optional bandwidth cap, and per-request
retries with a time budget. Uploads hash each file with xxh3-128 in the reading thread, in file
order; downloads hash the bytes they write, in file order, in the same pass. ETags are never used
as content digests (a multipart ETag is an MD5 of MD5s, and not even that under SSE).

Payload signing: `sign_payload=True` (the default, botocore's own choice over plain http) sends the
SHA-256 of every request body, which the gateway checks, at ~0.5 CPU-s/GB on the client;
`sign_payload=False` sends UNSIGNED-PAYLOAD (integrity then rests on the xxh3 read-back).

The core (client, pool, limits, retries, types) is ops.s3engine; this module adds the operations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from storekit.ops.s3download import download_files
from storekit.ops.s3engine import DIGEST_META_KEY as DIGEST_META_KEY
from storekit.ops.s3engine import GONE_UPLOAD_CODES as GONE_UPLOAD_CODES
from storekit.ops.s3engine import S3_MAX_PARTS as S3_MAX_PARTS
from storekit.ops.s3engine import DownloadItem as DownloadItem
from storekit.ops.s3engine import DownloadResult as DownloadResult
from storekit.ops.s3engine import MiB as MiB
from storekit.ops.s3engine import NoSuchUpload as NoSuchUpload
from storekit.ops.s3engine import S3Engine
from storekit.ops.s3engine import TransferConfig as TransferConfig
from storekit.ops.s3engine import UploadItem as UploadItem
from storekit.ops.s3engine import UploadResult as UploadResult
from storekit.ops.s3engine import fadvise_dontneed as fadvise_dontneed
from storekit.ops.s3engine import part_size_for as part_size_for
from storekit.ops.s3engine import tier_bucket_prefix as tier_bucket_prefix
from storekit.ops.s3upload import upload_files


class S3Transfer(S3Engine):
    """Uploads and downloads for one bucket, sharing one pool and one set of limits."""

    def upload_files(
        self, items: Sequence[UploadItem], on_done: Callable[[UploadResult], None] | None = None
    ) -> list[UploadResult]:
        return upload_files(self, items, on_done)

    def download_files(self, items: Sequence[DownloadItem]) -> list[DownloadResult]:
        return download_files(self, items)
