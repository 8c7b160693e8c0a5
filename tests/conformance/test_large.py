"""Large objects: written in 16 MiB blocks (S3 multipart), read back byte for byte."""

from __future__ import annotations

import os

import xxhash

from storekit.ops import hash_file
from storekit.store import S3_BLOCK_SIZE, S3Store, Store

from .conftest import kept

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
        head = store.client.head_object(Bucket=store.bucket, Key=store._key(rel))
        assert head["ETag"].strip('"').endswith("-3")
    with store.open_read(rel) as f:  # ranged reads across block boundaries
        f.seek(16 * MIB - 5)
        assert f.read(10) == data[16 * MIB - 5 : 16 * MIB + 5]


def multipart_parts(store: Store, rel: str) -> int:
    """How many parts S3 stored the object in (1 for a single PUT); 1 on POSIX."""
    if not isinstance(store, S3Store):
        return 1
    head = store.client.head_object(Bucket=store.bucket, Key=store._key(rel))
    etag = head["ETag"].strip('"')
    return int(etag.rsplit("-", 1)[1]) if "-" in etag else 1


def test_multipart_with_metadata(store: Store) -> None:
    data = os.urandom(S3_BLOCK_SIZE + 3 * MIB)  # two parts on S3
    meta = kept(store, {"xxh3-128": xxhash.xxh3_128_hexdigest(data), "writer": "storekit"})
    with store.atomic_writer("ckpt/rank0.distcp", metadata=meta) as fh:
        for start in range(0, len(data), MIB):
            fh.write(data[start : start + MIB])
    assert store.read_bytes("ckpt/rank0.distcp") == data
    assert store.get_metadata("ckpt/rank0.distcp") == meta
    assert multipart_parts(store, "ckpt/rank0.distcp") == (2 if isinstance(store, S3Store) else 1)


def test_an_object_over_the_part_count_ceiling(store: Store) -> None:
    """With the ceiling lowered to 4 parts of 5 MiB (20 MiB), a 46 MiB object still goes up whole:
    the parts grow as the upload goes on, since a streamed upload's size is not known in advance."""
    if isinstance(store, S3Store):
        store.block_size, store.max_parts = 5 * MIB, 4  # S3's smallest part; 4 x 5 MiB < 46 MiB
        assert [store.part_size(n) >> 20 for n in range(4)] == [5, 10, 20, 40]
    data = os.urandom(46 * MIB)
    with store.atomic_writer("big/model.bin", metadata=kept(store, {"parts": "grown"})) as fh:
        for start in range(0, len(data), MIB):  # as torch.save writes: many small writes
            fh.write(data[start : start + MIB])
    assert store.info("big/model.bin").size == len(data)
    assert hash_file(store, "big/model.bin").xxh3_128 == xxhash.xxh3_128_hexdigest(data)
    assert store.get_metadata("big/model.bin") == kept(store, {"parts": "grown"})
    if isinstance(store, S3Store):
        assert multipart_parts(store, "big/model.bin") == 4  # 5 + 10 + 20 + 11 MiB
