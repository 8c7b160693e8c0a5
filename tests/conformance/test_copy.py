"""ops.copy_file / copy_verified across stores: bytes, size and xxh3-128 agree with an independent hash."""

from __future__ import annotations

import os

import pytest
import xxhash

from storekit import ops
from storekit.errors import MismatchError, NotFoundError
from storekit.ops import CHUNK, copy_file, copy_verified, hash_file, verify_file
from storekit.store import Store

from .conftest import kept, tree


def test_copy_file_digest_and_bytes(store_pair: tuple[Store, Store]) -> None:
    src, dst = store_pair
    data = os.urandom(CHUNK + 12345)  # more than one read chunk
    src.write_bytes("datasets/text/shard_000.bin", data)
    seen: list[int] = []
    digest = copy_file(
        src,
        "datasets/text/shard_000.bin",
        dst,
        "copy/shard_000.bin",
        metadata=kept(dst, {"origin": "src"}),
        progress=seen.append,
    )
    assert digest.size == len(data) == sum(seen)
    assert digest.xxh3_128 == xxhash.xxh3_128_hexdigest(data)
    assert dst.read_bytes("copy/shard_000.bin") == data
    assert dst.get_metadata("copy/shard_000.bin") == kept(dst, {"origin": "src"})
    assert hash_file(dst, "copy/shard_000.bin") == digest
    assert hash_file(src, "datasets/text/shard_000.bin") == digest


def test_copy_verified_and_mismatch(store_pair: tuple[Store, Store]) -> None:
    src, dst = store_pair
    data = b"checkpoint bytes " * 1000
    src.write_bytes("ckpt.bin", data)
    digest = copy_verified(src, "ckpt.bin", dst, "ckpt.bin")
    assert digest.xxh3_128 == xxhash.xxh3_128_hexdigest(data) and digest.size == len(data)
    verify_file(dst, "ckpt.bin", digest)
    dst.write_bytes("ckpt.bin", data[:-1] + b"!")  # same size, one byte differs
    with pytest.raises(MismatchError) as info:
        verify_file(dst, "ckpt.bin", digest)
    assert info.value.exit_code == 4 and "ckpt.bin" in str(info.value)


def test_copy_of_missing_source_writes_nothing(store_pair: tuple[Store, Store]) -> None:
    src, dst = store_pair
    before = tree(dst)
    with pytest.raises(NotFoundError):
        copy_file(src, "nope.bin", dst, "out/nope.bin")
    assert tree(dst) == before


def test_posix_copies_take_the_one_local_copy_loop(
    store_pair: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two POSIX stores the bytes go through ops.localcopy (the loop the tier's drain and
    recall use: fsync, writeback per chunk, no page cache left); S3 on either side streams."""
    src, dst = store_pair
    calls: list[tuple[str, str]] = []
    real = ops.copy_fd

    def spy(fin: int, fout: int, *, src: str, dst: str, progress: object = None) -> object:
        calls.append((src, dst))
        return real(fin, fout, src=src, dst=dst, progress=progress)  # type: ignore[arg-type]

    monkeypatch.setattr(ops, "copy_fd", spy)
    data = os.urandom(3 * CHUNK // 2)
    src.write_bytes("a/in.bin", data)
    digest = copy_verified(src, "a/in.bin", dst, "b/out.bin")
    assert digest.xxh3_128 == xxhash.xxh3_128_hexdigest(data) and dst.read_bytes("b/out.bin") == data
    both_posix = src.local_path("") is not None and dst.local_path("") is not None
    want = [(f"{src.display_url}/a/in.bin", f"{dst.display_url}/b/out.bin")] if both_posix else []
    assert calls == want
    assert [e.path for e in dst.walk("b")] == ["b/out.bin"]  # the temp was renamed, none is left
