"""Read-back of uploaded objects: every byte fetched again (ranged GETs) and hashed in order.

This is what lets a mover free a source: the digest of the bytes the gateway now serves equals the
digest computed while reading the source. Nothing is written locally; a few ranges are in flight at
once through the engine's shared pool, so read-back overlaps the uploads still going on.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections import deque

import xxhash

from storekit import faults
from storekit.ops.s3download import ShortBody
from storekit.ops.s3engine import S3Engine

WINDOW = 4  # ranges in flight per object being read back


def readback_digest(engine: S3Engine, key: str) -> tuple[int, str]:
    """(size, xxh3-128) of the object `key` as the gateway serves it now."""
    head = engine.call(
        f"read back {engine.bucket}/{key}", lambda: engine.client.head_object(Bucket=engine.bucket, Key=key)
    )
    size, etag = int(head["ContentLength"]), str(head["ETag"])
    step = engine.config.range_size
    hasher = xxhash.xxh3_128()
    offsets = iter(range(0, size, step))
    window: deque[cf.Future[bytes]] = deque()

    def fetch(offset: int) -> bytes:
        length = min(step, size - offset)

        def get() -> bytes:
            resp = engine.client.get_object(
                Bucket=engine.bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}", IfMatch=etag
            )
            data: bytes = resp["Body"].read()
            if len(data) != length:
                raise ShortBody(f"{len(data)} of {length} bytes at offset {offset}")
            return data

        return engine.call(f"read back {engine.bucket}/{key}", get)

    try:
        for offset in offsets:
            window.append(engine.pool.submit(fetch, offset))
            if len(window) >= WINDOW:
                hasher.update(window.popleft().result())
        while window:
            hasher.update(window.popleft().result())
    finally:
        for fut in window:
            fut.cancel()
    faults.point("tier.object-read-back")
    return size, hasher.hexdigest()
