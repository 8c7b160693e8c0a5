"""glob and streaming reads with read-ahead: what `prepare dataset` inputs use, alike on every backend."""

from __future__ import annotations

import pytest

from storekit.errors import NotFoundError
from storekit.store import Store

FILES = {
    "raw/a.jsonl": b'{"text": "a"}\n',
    "raw/b.jsonl": b'{"text": "bb"}\n',
    "raw/c.txt": b"c",
    "raw/.hidden.jsonl": b"h",
    "raw/sub/d.jsonl": b"dddd",
    "raw/sub/deeper/e.jsonl": b"eeeee",
    "rawer/f.jsonl": b"f",
}


@pytest.fixture
def populated(store: Store) -> Store:
    for rel, data in FILES.items():
        store.write_bytes(rel, data)
    return store


def _found(store: Store, pattern: str) -> list[tuple[str, int]]:
    return [(e.path, e.size) for e in store.glob(pattern)]


def test_glob_one_level_sorted_with_sizes(populated: Store) -> None:
    assert _found(populated, "raw/*.jsonl") == [
        ("raw/.hidden.jsonl", 1),  # hidden names match: callers decide what to skip
        ("raw/a.jsonl", 14),
        ("raw/b.jsonl", 15),
    ]
    assert _found(populated, "raw/?.txt") == [("raw/c.txt", 1)]
    assert _found(populated, "raw/[ab].jsonl") == [("raw/a.jsonl", 14), ("raw/b.jsonl", 15)]


def test_glob_returns_files_never_directories(populated: Store) -> None:
    assert _found(populated, "raw/*") == [
        ("raw/.hidden.jsonl", 1),
        ("raw/a.jsonl", 14),
        ("raw/b.jsonl", 15),
        ("raw/c.txt", 1),
    ]
    assert _found(populated, "raw*/f.jsonl") == [("rawer/f.jsonl", 1)]


def test_glob_double_star_spans_directories(populated: Store) -> None:
    assert _found(populated, "raw/sub/**/*.jsonl") == [("raw/sub/d.jsonl", 4), ("raw/sub/deeper/e.jsonl", 5)]


def test_glob_without_a_match_is_empty(populated: Store) -> None:
    assert populated.glob("raw/*.parquet") == []
    assert populated.glob("nowhere/*.jsonl") == []


def test_glob_refuses_to_leave_the_root(populated: Store) -> None:
    from storekit.errors import PathEscapeError

    with pytest.raises(PathEscapeError):
        populated.glob("../*")


@pytest.mark.parametrize("block_size", [None, 4, 1 << 20])
def test_open_read_streams_with_read_ahead(store: Store, block_size: int | None) -> None:
    data = bytes(range(256)) * 64  # 16 KiB: several read-ahead blocks of 4 bytes
    store.write_bytes("big.bin", data)
    with store.open_read("big.bin", block_size=block_size) as fh:
        head = fh.read(10)
        fh.seek(5000)
        middle = fh.read(7)
        fh.seek(0)
        whole = fh.read()
    assert (head, middle, whole) == (data[:10], data[5000:5007], data)


def test_open_read_of_a_missing_file_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.open_read("missing.bin", block_size=1 << 20)
