"""list/walk/info: the same tree reads back identically on every backend."""

from __future__ import annotations

import time

import pytest

from storekit.errors import NotFoundError
from storekit.store import Store

from .conftest import tree

FILES = {
    "a.bin": b"abc",
    "d/b.bin": b"0123456789",
    "d/e/c.bin": b"",
    "d.txt": b"t",  # sorts after the directory `d` and everything in it
    "dd/x": b"xx",
}


@pytest.fixture
def populated(store: Store) -> Store:
    for rel, data in FILES.items():
        store.write_bytes(rel, data)
    store.makedirs("empty")
    return store


def test_list_root_sorted_with_kinds_and_sizes(populated: Store) -> None:
    entries = populated.list("")
    assert [(e.path, e.is_dir) for e in entries] == [
        ("a.bin", False),
        ("d", True),
        ("d.txt", False),
        ("dd", True),
        ("empty", True),
    ]
    sizes = {e.path: e.size for e in entries if not e.is_dir}
    assert sizes == {"a.bin": 3, "d.txt": 1}
    assert [e.name for e in entries] == ["a.bin", "d", "d.txt", "dd", "empty"]


def test_list_subdirectory(populated: Store) -> None:
    assert [(e.path, e.is_dir, e.size if not e.is_dir else None) for e in populated.list("d")] == [
        ("d/b.bin", False, 10),
        ("d/e", True, None),
    ]
    assert populated.list("empty") == []


def test_walk_parents_first_sorted_no_duplicates(populated: Store) -> None:
    assert tree(populated) == [
        ("a.bin", False, 3),
        ("d", True, None),
        ("d/b.bin", False, 10),
        ("d/e", True, None),
        ("d/e/c.bin", False, 0),
        ("d.txt", False, 1),
        ("dd", True, None),
        ("dd/x", False, 2),
        ("empty", True, None),
    ]
    assert tree(populated, "d") == [("d/b.bin", False, 10), ("d/e", True, None), ("d/e/c.bin", False, 0)]
    assert tree(populated, "empty") == []


def test_walk_does_not_report_directory_markers(store: Store) -> None:
    # makedirs on S3 writes `prefix/` marker objects; they stand for the directory, not a child
    store.makedirs("m/n")
    store.write_bytes("m/n/f", b"1")
    store.makedirs("m")
    assert tree(store) == [("m", True, None), ("m/n", True, None), ("m/n/f", False, 1)]


def test_file_mtimes_are_recent_timestamps(store: Store) -> None:
    before = time.time()
    store.write_bytes("t/f.bin", b"x")
    after = time.time()
    for entry in (store.info("t/f.bin"), *store.list("t"), *[e for e in store.walk("") if not e.is_dir]):
        assert entry.mtime is not None
        # RGW stamps with its own clock (same host) at millisecond or second resolution
        assert before - 2 <= entry.mtime <= after + 2, (entry, before, after)


def test_info_and_exists(populated: Store) -> None:
    f = populated.info("d/b.bin")
    assert (f.path, f.name, f.size, f.is_dir) == ("d/b.bin", "b.bin", 10, False)
    d = populated.info("d/e")
    assert (d.path, d.is_dir) == ("d/e", True)
    assert populated.info("empty").is_dir
    assert populated.info("").is_dir
    assert populated.exists("d/e/c.bin") and populated.exists("d") and populated.exists("empty")
    assert not populated.exists("d/nope") and not populated.exists("nope/deeper")


def test_list_or_walk_of_a_file_is_not_found(populated: Store) -> None:
    with pytest.raises(NotFoundError, match="not a directory"):
        populated.list("a.bin")
    with pytest.raises(NotFoundError, match="not a directory"):
        list(populated.walk("d/b.bin"))


def test_scan_agrees_with_walk(populated: Store) -> None:
    """scan() (what tier planning fingerprints) lists what walk() lists, in the same order."""
    walked = list(populated.walk())
    scanned = list(populated.scan())
    assert [(s.rel, s.is_dir) for s in scanned] == [(w.path, w.is_dir) for w in walked]
    for s, w in zip(scanned, walked, strict=True):
        if not w.is_dir:
            assert s.size == w.size and w.mtime is not None
            assert abs(s.mtime_ns - w.mtime * 1e9) < 1e6  # walk's float seconds vs integer ns
    assert [s.rel for s in populated.scan("d")] == ["d/b.bin", "d/e", "d/e/c.bin"]
    with pytest.raises(NotFoundError):
        list(populated.scan("nope"))
