"""Small per-file user metadata round-trips on every backend (xattrs on POSIX, x-amz-meta-* on S3)."""

from __future__ import annotations

import pytest

from storekit.errors import InputError, NotFoundError, StorekitError
from storekit.store import Store

from .conftest import tree


def write_and_read_back(store: Store, meta: dict[str, str]) -> None:
    """Metadata comes back as written where the store says it keeps metadata; where it cannot keep
    it (no user xattrs), the write is refused whole: never a file without the metadata asked for."""
    if store.capabilities.user_metadata:
        store.write_bytes("f.bin", b"data", metadata=meta)
        assert store.get_metadata("f.bin") == meta
        return
    with pytest.raises(StorekitError, match=r"without user xattrs, so its metadata \(") as info:
        store.write_bytes("f.bin", b"data", metadata=meta)
    assert info.value.exit_code == 1 and "f.bin" in info.value.message
    assert tree(store) == []


def test_round_trip(store: Store) -> None:
    write_and_read_back(
        store, {"xxh3-128": "0123456789abcdef0123456789abcdef", "source": "datasets/text/wiki", "n": "42"}
    )


def test_unicode_and_awkward_values(store: Store) -> None:
    meta = {
        "name": "çorba 数据 ü",
        "spaces": "  padded  ",
        "multi": "line1\nline2",
        "encoded": "=?UTF-8?B?eA==?=",
    }
    write_and_read_back(store, meta)


def test_no_metadata_is_empty(store: Store) -> None:
    store.write_bytes("plain.bin", b"x")
    assert store.get_metadata("plain.bin") == {}


def test_missing_file(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.get_metadata("nope.bin")


def test_keys_must_be_portable(store: Store) -> None:
    # S3 lower-cases keys and RGW rewrites '_' to '-': refuse what would not come back as written
    for key in ("Upper", "with space", "", "ü", "under_score", "x" * 65):
        with pytest.raises(InputError, match="metadata key"):
            store.write_bytes("f.bin", b"x", metadata={key: "v"})
    assert not store.exists("f.bin")
    assert list(store.walk("")) == []
