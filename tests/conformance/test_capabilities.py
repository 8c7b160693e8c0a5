"""Capabilities are probed per store and declared truthfully: what a store says it can do, it does,
and what it cannot do it refuses instead of faking."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from storekit.config import TierConfig
from storekit.diskspace import free_bytes
from storekit.errors import StorekitError
from storekit.mounts import mount_of
from storekit.store import PosixStore, S3Store, Store, open_store

from .conftest import tree


def test_declared_capabilities(store: Store) -> None:
    caps = store.capabilities
    if isinstance(store, PosixStore):
        assert (caps.atomic_rename, caps.directories, caps.posix_modes) == (True,) * 3
        fs_type = (mount_of(store.root) or {}).get("fs_type")
        # ramfs reports no size at all, a CephFS without a ceph-mgr 0 blocks: unknown, not full
        assert caps.free_space == (fs_type != "ramfs" and os.statvfs(store.root).f_blocks > 0)
        assert caps.user_metadata == (fs_type != "ramfs")
        lustre = fs_type == "lustre" and shutil.which("lfs") is not None
        assert caps.striping == (lustre or fs_type == "fuse.ceph-fuse")  # ceph.dir.layout xattrs
    else:
        assert isinstance(store, S3Store)
        assert (caps.atomic_rename, caps.directories, caps.posix_modes, caps.free_space) == (False,) * 4
        assert not caps.striping and caps.user_metadata
    assert store.capabilities is caps  # probed once per store instance


def test_free_space(store: Store) -> None:
    free = store.free_space()
    if store.capabilities.free_space:
        assert isinstance(free, int) and not isinstance(free, bool) and free > 0
        stat = shutil.disk_usage(store.local_path("") or "/")
        assert abs(free - stat.free) < max(stat.total // 100, 64 << 20)  # same filesystem, within 1 %
    else:
        assert free is None


def test_free_space_where_a_path_would_be(store: Store) -> None:
    """free_space(rel): what the file system `rel` is (or would be created) on has free; a drain asks
    it of the destination tier's store before writing. Asking creates nothing."""
    free = store.free_space("not/made/yet")
    if store.capabilities.free_space:
        whole = store.free_space()
        assert isinstance(free, int) and isinstance(whole, int) and abs(free - whole) < 64 << 20
    else:
        assert free is None
    assert not store.exists("not")


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


# -- POSIX only: capabilities belong to the store's file system, not to the class ------------------
@pytest.fixture
def ramfs_below(local_store: Store) -> Iterator[Path]:
    """A ramfs (no user xattrs) mounted at `nometa/` inside a store whose own file system has them."""
    point = Path(local_store.local_path("nometa") or "")
    point.mkdir()
    done = subprocess.run(["mount", "-t", "ramfs", "ramfs", str(point)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a ramfs here ({done.stderr.strip()})")
    yield point
    subprocess.run(["umount", "-l", str(point)], check=True)


def test_two_posix_stores_on_different_file_systems_differ(
    local_store: Store, noxattr_store: Store, tmp_path: Path
) -> None:
    assert type(local_store) is type(noxattr_store)
    assert local_store.capabilities.user_metadata and not noxattr_store.capabilities.user_metadata
    assert local_store.capabilities.free_space and not noxattr_store.capabilities.free_space
    # a root not created yet is probed where it will be created: its nearest existing ancestor
    later = open_store(TierConfig(name="later", url=(tmp_path / "a" / "b").as_uri()))
    assert later.capabilities == local_store.capabilities
    assert free_bytes(str(tmp_path)) is not None


def test_metadata_refused_where_a_mount_below_the_root_lacks_xattrs(
    local_store: Store, ramfs_below: Path
) -> None:
    assert local_store.capabilities.user_metadata  # the root's file system has them
    local_store.write_bytes("nometa/plain.bin", b"no metadata asked: fine")
    before = tree(local_store)
    with pytest.raises(StorekitError, match="without user xattrs") as info:
        local_store.write_bytes("nometa/sub/f.bin", b"data", metadata={"xxh3-128": "00" * 16})
    assert info.value.exit_code == 1
    assert tree(local_store) == before  # no file, no temp, no directory it created
    assert sorted(p.name for p in ramfs_below.iterdir()) == ["plain.bin"]


def test_a_fresh_instance_probes_again(tmp_path: Path) -> None:
    root = tmp_path / f"r-{uuid.uuid4().hex[:6]}"
    first = open_store(TierConfig(name="t", url=root.as_uri()))
    assert first.capabilities.user_metadata
    root.mkdir()
    done = subprocess.run(["mount", "-t", "ramfs", "ramfs", str(root)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a ramfs here ({done.stderr.strip()})")
    try:
        # the same URL, now a mount without xattrs: a new store sees it; the old one keeps its answer
        second = open_store(TierConfig(name="t", url=root.as_uri()))
        assert not second.capabilities.user_metadata and first.capabilities.user_metadata
    finally:
        subprocess.run(["umount", "-l", str(root)], check=True)
