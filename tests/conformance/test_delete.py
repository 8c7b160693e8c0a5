"""delete: files, directories (recursive or empty), missing paths, and never the root or a neighbour."""

from __future__ import annotations

import pytest

from storekit.errors import NotFoundError, PathEscapeError, StorekitError
from storekit.store import Store

from .conftest import tree


@pytest.fixture
def populated(store: Store) -> Store:
    for rel in ("d/a", "d/sub/b", "d.txt", "dd/c", "top"):
        store.write_bytes(rel, rel.encode())
    store.makedirs("empty")
    return store


def test_delete_file(populated: Store) -> None:
    populated.delete("d/a")
    assert not populated.exists("d/a")
    assert populated.read_bytes("d/sub/b") == b"d/sub/b"


def test_delete_recursive_spares_neighbours_with_the_same_prefix(populated: Store) -> None:
    populated.delete("d", recursive=True)
    assert not populated.exists("d")
    assert tree(populated) == [("d.txt", False, 5), ("dd", True, None), ("dd/c", False, 4),
                               ("empty", True, None), ("top", False, 3)]  # fmt: skip


def test_delete_recursive_of_a_file(populated: Store) -> None:
    populated.delete("top", recursive=True)
    assert not populated.exists("top")


def test_delete_empty_directory(populated: Store) -> None:
    populated.delete("empty")
    assert not populated.exists("empty")


def test_delete_non_empty_directory_needs_recursive(populated: Store) -> None:
    before = tree(populated)
    with pytest.raises(StorekitError, match=r"(?i)not empty") as info:
        populated.delete("d")
    assert not isinstance(info.value, NotFoundError)
    assert tree(populated) == before


@pytest.mark.parametrize("recursive", [False, True])
def test_delete_missing_is_not_found(populated: Store, recursive: bool) -> None:
    before = tree(populated)
    with pytest.raises(NotFoundError) as info:
        populated.delete("nope", recursive=recursive)
    assert info.value.exit_code == 3 and "nope" in str(info.value)
    with pytest.raises(NotFoundError):
        populated.delete("d/missing/deeper", recursive=recursive)
    assert tree(populated) == before


@pytest.mark.parametrize("root", ["", ".", "./"])
def test_refuses_to_delete_the_root(populated: Store, root: str) -> None:
    before = tree(populated)
    with pytest.raises(PathEscapeError):
        populated.delete(root, recursive=True)
    assert tree(populated) == before
