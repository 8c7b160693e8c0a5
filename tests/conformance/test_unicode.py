"""Non-ASCII names (the users write Portuguese, Turkish and Chinese) work end to end."""

from __future__ import annotations

import xxhash

from storekit.ops import copy_verified
from storekit.store import Store

from .conftest import kept, tree

NAME = "datasets/text/çorba/数据/ü.bin"


def test_unicode_paths(store: Store) -> None:
    store.write_bytes(NAME, "açúcar, şeker, 糖".encode(), metadata=kept(store, {"lang": "pt"}))
    store.write_bytes("datasets/text/çorba/ğ ş.txt", b"tr")
    assert store.read_bytes(NAME) == "açúcar, şeker, 糖".encode()
    assert store.info(NAME).name == "ü.bin"
    assert [e.name for e in store.list("datasets/text/çorba")] == ["ğ ş.txt", "数据"]
    assert tree(store, "datasets/text") == [
        ("datasets/text/çorba", True, None),
        ("datasets/text/çorba/ğ ş.txt", False, 2),
        ("datasets/text/çorba/数据", True, None),
        ("datasets/text/çorba/数据/ü.bin", False, len("açúcar, şeker, 糖".encode())),
    ]
    assert store.get_metadata(NAME) == kept(store, {"lang": "pt"})
    store.delete("datasets/text/çorba/数据", recursive=True)
    assert [e.name for e in store.list("datasets/text/çorba")] == ["ğ ş.txt"]


def test_unicode_copy_across(store: Store, make_store: object) -> None:
    data = "训练数据 ".encode() * 500
    store.write_bytes(NAME, data)
    other = make_store("local")  # type: ignore[operator]
    digest = copy_verified(store, NAME, other, NAME)
    assert digest.xxh3_128 == xxhash.xxh3_128_hexdigest(data)
    assert other.read_bytes(NAME) == data
