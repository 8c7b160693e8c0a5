"""S3 deletes that cannot lie, and the archive bucket's precondition (no versioning).

A multi-object delete answers per key; a bulk delete that ignores those answers (as s3fs's
does) makes a key the gateway refused look deleted. Here every key's answer is checked, and the
keys are listed again afterwards: a delete reports success only when nothing it was asked to
remove is still listed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from storekit.errors import StorekitError

T = TypeVar("T")


class S3Calls(Protocol):
    """What these functions need: a bucket, a botocore client, and a way to call it under the one
    retry rule (the transfer engine, with its long budget, or an S3Store, with the store's)."""

    @property
    def bucket(self) -> str: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def client(self) -> Any: ...

    def call(self, what: str, fn: Callable[[], T]) -> T: ...


DELETE_BATCH = 1000  # the S3 limit per DeleteObjects request


class DeleteFailed(StorekitError):
    def __init__(self, message: str, *, failed: dict[str, str]) -> None:
        super().__init__(message, hint="fix the cause (e.g. permissions or a bucket policy) and rerun")
        self.failed = failed  # key -> the gateway's error code, or "still listed"


def delete_keys(engine: S3Calls, keys: Sequence[str]) -> None:
    """Delete exactly `keys`; raises DeleteFailed naming the first key that is not gone."""
    failed: dict[str, str] = {}
    unique = sorted(set(keys))
    for start in range(0, len(unique), DELETE_BATCH):
        batch = unique[start : start + DELETE_BATCH]
        resp = engine.call(
            f"delete {len(batch)} objects in {engine.bucket}",
            lambda batch=batch: engine.client.delete_objects(  # type: ignore[misc]
                Bucket=engine.bucket,
                Delete={"Objects": [{"Key": k} for k in batch], "Quiet": False},
            ),
        )
        for err in resp.get("Errors", []):
            failed[str(err["Key"])] = str(err.get("Code") or "error")
        answered = {str(d["Key"]) for d in resp.get("Deleted", [])} | set(failed)
        for key in batch:
            if key not in answered:
                failed[key] = "no answer"
    remaining = _still_listed(engine, unique)
    for key in remaining:
        failed.setdefault(key, "still listed")
    if failed:
        first = min(failed)
        raise DeleteFailed(
            f"s3://{engine.bucket}/{first}: not deleted ({failed[first]}); "
            f"{len(failed)} of {len(unique)} objects remain",
            failed=failed,
        )


def delete_prefix(engine: S3Calls, prefix: str) -> int:
    """Delete every object under `prefix` (a 'directory'); returns how many were deleted."""
    if not prefix.strip("/"):
        raise StorekitError(f"refusing to delete everything in bucket {engine.bucket}")
    keys = list(list_keys(engine, prefix.rstrip("/") + "/"))
    delete_keys(engine, keys)
    left = next(iter(list_keys(engine, prefix.rstrip("/") + "/")), None)
    if left is not None:  # written meanwhile by someone else: say so rather than claim it is empty
        where = f"s3://{engine.bucket}/{left}"
        raise DeleteFailed(f"{where}: appeared under the prefix while deleting", failed={})
    return len(keys)


def list_keys(engine: S3Calls, prefix: str) -> Iterable[str]:
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"Bucket": engine.bucket, "Prefix": prefix}
        if token:
            kwargs["ContinuationToken"] = token
        page: dict[str, Any] = engine.call(
            f"list s3://{engine.bucket}/{prefix}",
            lambda kw=kwargs: engine.client.list_objects_v2(**kw),  # type: ignore[misc]
        )
        for obj in page.get("Contents", []):
            yield str(obj["Key"])
        if not page.get("IsTruncated"):
            return
        token = page["NextContinuationToken"]


FEW_KEYS = 4  # keys of one prefix checked by a listing of their own each, not of the whole prefix


def _still_listed(engine: S3Calls, keys: Sequence[str]) -> list[str]:
    """The keys of `keys` a fresh listing still shows: one listing per common prefix, or, for a
    few keys of a prefix (a manifest beside many units' objects), one single-key listing each."""
    groups: dict[str, list[str]] = {}
    for key in keys:
        groups.setdefault(posixpath.dirname(key), []).append(key)
    found: list[str] = []
    for prefix, group in sorted(groups.items()):
        if len(group) <= FEW_KEYS:
            found += [key for key in group if _listed(engine, key)]
            continue
        wanted = set(group)
        found += [key for key in list_keys(engine, prefix + "/" if prefix else "") if key in wanted]
    return sorted(set(found))


def _listed(engine: S3Calls, key: str) -> bool:
    """A listing of `key` as the prefix shows `key` itself (it sorts before every longer key)."""
    page: dict[str, Any] = engine.call(
        f"list s3://{engine.bucket}/{key}",
        lambda: engine.client.list_objects_v2(Bucket=engine.bucket, Prefix=key, MaxKeys=1),
    )
    first = page.get("Contents", [])[:1]
    return bool(first) and str(first[0]["Key"]) == key


def bucket_versioning(engine: S3Calls) -> str | None:
    """The bucket's versioning status: "Enabled", "Suspended", or None where it was never enabled."""
    resp = engine.call(
        f"versioning of bucket {engine.bucket}",
        lambda: engine.client.get_bucket_versioning(Bucket=engine.bucket),
    )
    status = resp.get("Status")
    return str(status) if status else None


def check_unversioned(engine: S3Calls) -> None:
    """Refuse a versioned bucket: deletes there only add delete markers and the bytes stay."""
    status = bucket_versioning(engine)
    if status is not None:
        raise StorekitError(
            f"bucket {engine.bucket} at {engine.endpoint} has versioning {status}: "
            "deletes would keep old versions, so the archive cannot free or replace anything",
            hint="use a bucket that never had versioning enabled",
        )
