"""The one S3 transfer engine, as callers use it: `S3Transfer`, the engine's core (ops.s3engine: one
pool, byte budget, bandwidth cap, retries, xxh3 in the reading pass, payload signing) with its
operations as methods (uploads: ops.s3upload; downloads: ops.s3download)."""

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
