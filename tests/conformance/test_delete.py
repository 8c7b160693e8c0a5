"""delete: files, directories (recursive or empty), missing paths, and never the root or a neighbour."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from storekit.durable import TOMBSTONE_MARK, is_tombstone
from storekit.errors import NotFoundError, PathEscapeError, StorekitError
from storekit.store import S3Store, Store

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


@pytest.fixture
def refusing(populated: Store) -> Iterator[Store]:
    """Deletes below `d/locked/` fail for real: on S3 a bucket policy denies s3:DeleteObject there;
    on POSIX `d/locked` is a read-only bind mount of itself."""
    populated.write_bytes("d/locked/x", b"kept")
    if isinstance(populated, S3Store):
        key = populated._key("d/locked")
        policy = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject",
            "Resource": f"arn:aws:s3:::{populated.bucket}/{key}/*"}]}  # fmt: skip
        populated.client.put_bucket_policy(Bucket=populated.bucket, Policy=json.dumps(policy))
        yield populated
        populated.client.delete_bucket_policy(Bucket=populated.bucket)
        return
    locked = populated.local_path("d/locked") or ""
    for args in (["--bind", locked, locked], ["-o", "remount,bind,ro", locked]):
        done = subprocess.run(["mount", *args], capture_output=True, text=True)
        if done.returncode != 0:
            subprocess.run(["umount", locked], check=False)
            pytest.skip(f"cannot make a read-only bind mount here ({done.stderr.strip()})")
    yield populated
    root = Path(populated.local_path("") or "")
    moved = sorted(root.glob(f".d{TOMBSTONE_MARK}*/locked"))  # the delete renamed it into a tombstone
    subprocess.run(["umount", str(moved[0]) if moved else locked], check=True)


def test_a_delete_that_partly_fails_says_so(refusing: Store) -> None:
    store = refusing
    with pytest.raises(StorekitError) as info:
        store.delete("d", recursive=True)
    assert not isinstance(info.value, NotFoundError) and info.value.exit_code == 1
    assert "d/locked/x" in str(info.value), str(info.value)  # names what is still there
    if isinstance(store, S3Store):  # no rename: what could not be deleted stays under its name
        assert store.read_bytes("d/locked/x") == b"kept" and store.exists("d")
    else:  # tombstone first: no half-deleted "d"; what is left is in the tombstone the error names
        (tomb,) = [e.path for e in store.list("") if is_tombstone(e.path)]
        assert f"tombstone {store.display_url}/{tomb}" in str(info.value) and not store.exists("d")
        assert store.read_bytes(f"{tomb}/locked/x") == b"kept"
    for rel in ("d.txt", "dd/c", "top"):  # neighbours untouched
        assert store.read_bytes(rel) == rel.encode()


def test_a_file_delete_that_fails_says_so(refusing: Store) -> None:
    """One file: on S3 its DeleteObjects answer is checked and the key listed again (store.s3delete),
    as for a directory's keys; on POSIX the unlink's error names it. The file stays whole."""
    store = refusing
    with pytest.raises(StorekitError) as info:
        store.delete("d/locked/x")
    assert info.value.exit_code == 1 and "d/locked/x" in str(info.value), str(info.value)
    if isinstance(store, S3Store):
        assert "not deleted (AccessDenied); 1 of 1 objects remain" in str(info.value)
    assert store.read_bytes("d/locked/x") == b"kept"
    assert store.read_bytes("d/a") == b"d/a"
