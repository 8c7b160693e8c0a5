"""Large objects: written in 16 MiB blocks (S3 multipart), read back byte for byte."""

from __future__ import annotations

import os

import xxhash

from storekit.ops import hash_file
from storekit.store import S3_BLOCK_SIZE, S3Store, Store

MIB = 1 << 20


def test_40_mib_in_blocks(store: Store) -> None:
    assert S3_BLOCK_SIZE == 16 * MIB
    block = os.urandom(MIB)
    blocks = [bytes([i]) + block[1:] for i in range(40)]  # every MiB distinct
    with store.atomic_writer("checkpoints/run_001/step_000100/model.bin") as fh:
        for b in blocks:
            fh.write(b)
    data = b"".join(blocks)
    rel = "checkpoints/run_001/step_000100/model.bin"
    assert store.info(rel).size == 40 * MIB
    assert store.read_bytes(rel) == data
    digest = hash_file(store, rel)
    assert digest.size == 40 * MIB and digest.xxh3_128 == xxhash.xxh3_128_hexdigest(data)
    if isinstance(store, S3Store):
        # a multipart object's ETag is "<md5 of part md5s>-<parts>": 16 + 16 + 8 MiB
        head = store.fs.call_s3("head_object", Bucket=store.bucket, Key=store._key(rel))
        assert head["ETag"].strip('"').endswith("-3")
    with store.open_read(rel) as f:  # ranged reads across block boundaries
        f.seek(16 * MIB - 5)
        assert f.read(10) == data[16 * MIB - 5 : 16 * MIB + 5]
