"""atomic_writer: a file appears whole or not at all; an aborted write leaves nothing behind."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from storekit.errors import NotFoundError, UnreachableError
from storekit.store import TMP_MARK, S3Store, Store

from .conftest import kept, tree

MIB = 1 << 20


class Boom(Exception):
    pass


@pytest.fixture
def unraisable() -> Iterator[list[str]]:
    """Exceptions raised where nobody can catch them (e.g. in a file object's __del__)."""
    seen: list[str] = []
    old = sys.unraisablehook

    def hook(info: Any) -> None:
        seen.append(f"{type(info.exc_value).__name__}: {info.exc_value}")

    sys.unraisablehook = hook
    try:
        yield seen
    finally:
        gc.collect()
        sys.unraisablehook = old


def pending_uploads(store: Store) -> list[str]:
    """Multipart uploads left open in the bucket (S3's kind of temp file)."""
    if not isinstance(store, S3Store):
        return []
    found = store.client.list_multipart_uploads(Bucket=store.bucket)
    return [u["Key"] for u in found.get("Uploads", [])]


def test_appears_only_when_the_block_ends(store: Store) -> None:
    with store.atomic_writer("out/data.bin") as fh:
        fh.write(b"first half ")
        assert not store.exists("out/data.bin")
        with pytest.raises(NotFoundError):
            store.read_bytes("out/data.bin")
        fh.write(b"second half")
    assert store.read_bytes("out/data.bin") == b"first half second half"
    assert tree(store) == [("out", True, None), ("out/data.bin", False, 22)]


@pytest.mark.parametrize("size", [10, 17 << 20], ids=["small", "multipart"])
def test_exception_leaves_nothing(store: Store, size: int, unraisable: list[str]) -> None:
    store.write_bytes("keep.txt", b"k")
    before = tree(store)
    with pytest.raises(Boom), store.atomic_writer("a/b/new.bin") as fh:
        fh.write(b"x" * size)  # 17 MiB > the 16 MiB block: S3 has started a multipart upload
        raise Boom()
    assert tree(store) == before  # no file, no temp, no directories it created
    assert not any(TMP_MARK in e.path for e in store.walk(""))
    assert pending_uploads(store) == []
    del fh
    gc.collect()
    assert unraisable == []  # the aborted file object is inert, also when garbage-collected


def test_exception_while_overwriting_keeps_the_old_file(store: Store, unraisable: list[str]) -> None:
    store.write_bytes("f.bin", b"old contents", metadata=kept(store, {"version": "1"}))
    with pytest.raises(Boom), store.atomic_writer("f.bin", metadata=kept(store, {"version": "2"})) as fh:
        fh.write(b"new")
        # a reader sees the old file, whole, while the new one is being written
        assert store.read_bytes("f.bin") == b"old contents"
        raise Boom()
    assert store.read_bytes("f.bin") == b"old contents"
    assert store.get_metadata("f.bin") == kept(store, {"version": "1"})
    assert [e.path for e in store.walk("")] == ["f.bin"]
    gc.collect()
    assert unraisable == []


def test_overwrite_replaces_whole(store: Store) -> None:
    store.write_bytes("f.bin", b"a" * 1000)
    with store.atomic_writer("f.bin") as fh:
        fh.write(b"b" * 10)
        assert store.read_bytes("f.bin") == b"a" * 1000
    assert store.read_bytes("f.bin") == b"b" * 10
    assert store.info("f.bin").size == 10


def test_empty_file(store: Store) -> None:
    store.write_bytes("empty.bin", b"", metadata=kept(store, {"kind": "empty"}))
    assert store.read_bytes("empty.bin") == b""
    assert store.info("empty.bin").size == 0
    assert store.get_metadata("empty.bin") == kept(store, {"kind": "empty"})


def test_open_read_streams(store: Store) -> None:
    data = bytes(range(256)) * 1000
    store.write_bytes("s.bin", data)
    with store.open_read("s.bin") as fh:
        parts = []
        while block := fh.read(4096):
            parts.append(block)
    assert b"".join(parts) == data


def test_concurrent_reader_never_sees_a_partial_file(store: Store) -> None:
    """A reader polling while the writer streams 18 MiB (two S3 parts) sees the old file or the new one."""
    old, new = b"o" * 1000, os.urandom(MIB) * 18
    store.write_bytes("shard.bin", old)
    sizes: set[int] = set()
    errors: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        try:
            while not done.is_set():
                sizes.add(store.info("shard.bin").size)
                assert store.read_bytes("shard.bin") in (old, new)
        except BaseException as exc:  # reported by the test thread below
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        with store.atomic_writer("shard.bin") as fh:
            for i in range(18):
                fh.write(new[i * MIB : (i + 1) * MIB])
                time.sleep(0.01)
    finally:
        done.set()
        thread.join(timeout=60)
    assert errors == []
    assert sizes <= {len(old), len(new)} and len(old) in sizes
    assert store.read_bytes("shard.bin") == new
    assert [e.path for e in store.walk("")] == ["shard.bin"]


def test_stream_opened_before_an_overwrite(store: Store) -> None:
    """An open reader gets the old bytes whole (POSIX keeps the old inode) or, where the backend cannot
    keep them (S3), a retryable error (exit 5); never bytes of both versions."""
    old, new = os.urandom(MIB), os.urandom(MIB)
    store.write_bytes("f.bin", old)
    with store.open_read("f.bin") as fh:
        store.write_bytes("f.bin", new)
        try:
            got = fh.read()
        except UnreachableError as exc:
            assert not store.capabilities.atomic_rename  # only S3 may refuse
            assert exc.exit_code == 5 and "replaced while it was being read" in str(exc)
        else:
            assert got == old
    assert store.read_bytes("f.bin") == new
