"""Paths never leave the tier root: `..`, absolute paths, NUL, backslashes and escaping symlinks."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from storekit.errors import ExitCode, PathEscapeError
from storekit.store import PosixStore, S3Store, Store

from .conftest import tree

OPERATIONS: dict[str, Callable[[Store, str], Any]] = {
    "info": lambda s, rel: s.info(rel),
    "exists": lambda s, rel: s.exists(rel),
    "open_read": lambda s, rel: s.open_read(rel),
    "write_bytes": lambda s, rel: s.write_bytes(rel, b"escaped"),
    "list": lambda s, rel: s.list(rel),
    "walk": lambda s, rel: list(s.walk(rel)),
    "makedirs": lambda s, rel: s.makedirs(rel),
    "delete": lambda s, rel: s.delete(rel, recursive=True),
    "get_metadata": lambda s, rel: s.get_metadata(rel),
    "free_space": lambda s, rel: s.free_space(rel),
}
ESCAPES = ["..", "../x", "a/../../x", "a/b/../../../etc", "/etc/passwd", "/", "a\\..\\b", "a\x00b"]


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_escapes_are_refused(store: Store, operation: str) -> None:
    store.write_bytes("a/inside", b"x")
    before = tree(store)
    for rel in ESCAPES:
        with pytest.raises(PathEscapeError) as info:
            OPERATIONS[operation](store, rel)
        assert info.value.exit_code == ExitCode.USAGE, rel
    assert tree(store) == before


def test_s3_keys_are_below_the_root(s3_store: S3Store) -> None:
    """`key(rel)`: the object key a move's transfer engine writes `rel` to (tier.dest)."""
    prefix = s3_store.root.split("/", 1)[1]
    assert s3_store.key("a/./b.bin") == f"{prefix}/a/b.bin" and s3_store.key("") == prefix
    s3_store.write_bytes("a/b.bin", b"keyed")
    got = s3_store.client.get_object(Bucket=s3_store.bucket, Key=s3_store.key("a/b.bin"))
    assert got["Body"].read() == b"keyed"
    for rel in ESCAPES:
        with pytest.raises(PathEscapeError):
            s3_store.key(rel)


def test_dot_components_inside_are_fine(store: Store) -> None:
    store.write_bytes("./a/./b.bin", b"ok")
    assert store.read_bytes("a/b.bin") == b"ok"
    assert [e.path for e in store.walk("a/")] == ["a/b.bin"]


def test_symlink_out_of_a_posix_root(local_store: PosixStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"not yours")
    root = Path(local_store.root)
    (root / "data").mkdir()
    os.symlink(outside, root / "data" / "link")
    os.symlink(outside / "secret", root / "file-link")
    os.symlink("../data", root / "data" / "inner")  # points inside: fine

    for operation in ("info", "open_read", "write_bytes", "list", "makedirs", "get_metadata"):
        for rel in ("data/link/secret", "data/link/new/file", "file-link"):
            if operation == "info" and rel == "file-link":
                continue  # info is lstat: it describes the link itself (below)
            with pytest.raises(PathEscapeError, match="outside the root"):
                OPERATIONS[operation](local_store, rel)
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]  # nothing written outside
    assert (outside / "secret").read_bytes() == b"not yours"

    # listing shows links as links and walk does not follow them
    links = {e.path: e.is_link for e in local_store.walk("")}
    assert links == {"data": False, "data/inner": True, "data/link": True, "file-link": True}
    assert local_store.info("file-link").is_link
    local_store.write_bytes("data/inner/via-inner", b"ok")
    assert (root / "data" / "via-inner").read_bytes() == b"ok"


def test_rel_outside_root(store: Store) -> None:
    with pytest.raises(PathEscapeError):
        store.rel("/somewhere/else" if isinstance(store, PosixStore) else "other-bucket/key")
