"""Capabilities are declared truthfully: what a backend says it can do, it does, and vice versa."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from storekit.errors import StorekitError
from storekit.store import PosixStore, S3Store, Store


def test_declared_capabilities(store: Store) -> None:
    caps = store.capabilities
    if isinstance(store, PosixStore):
        assert (caps.atomic_rename, caps.directories, caps.posix_modes, caps.free_space) == (True,) * 4
        assert caps.striping == bool(shutil.which("lfs"))
    else:
        assert isinstance(store, S3Store)
        assert (caps.atomic_rename, caps.directories, caps.posix_modes, caps.free_space) == (False,) * 4
        assert not caps.striping
    assert caps.user_metadata


def test_free_space(store: Store) -> None:
    free = store.free_space()
    if store.capabilities.free_space:
        assert isinstance(free, int) and not isinstance(free, bool) and free > 0
        stat = shutil.disk_usage(store.local_path("") or "/")
        assert abs(free - stat.free) < max(stat.total // 100, 64 << 20)  # same filesystem, within 1 %
    else:
        assert free is None


def test_rename_matches_declaration(store: Store) -> None:
    store.write_bytes("a/src.bin", b"payload")
    if store.capabilities.atomic_rename:
        store.rename("a/src.bin", "b/dst.bin")
        assert store.read_bytes("b/dst.bin") == b"payload" and not store.exists("a/src.bin")
    else:
        with pytest.raises(StorekitError, match="no atomic rename"):
            store.rename("a/src.bin", "b/dst.bin")
        assert store.read_bytes("a/src.bin") == b"payload" and not store.exists("b/dst.bin")


def test_modes_match_declaration(store: Store) -> None:
    store.makedirs("scratch")
    store.chmod("scratch", 0o1777)
    entry = store.info("scratch")
    if store.capabilities.posix_modes:
        assert entry.mode == 0o1777
        store.makedirs("ro", mode=0o555)
        assert store.info("ro").mode == 0o555
    else:
        assert entry.mode is None


def test_local_path_only_where_posix(store: Store) -> None:
    store.write_bytes("f", b"1")
    path = store.local_path("f")
    if isinstance(store, PosixStore):
        assert path is not None and Path(path).read_bytes() == b"1"
    else:
        assert path is None
