"""A unit's fingerprint changes with anything a plan must notice: bytes, mtime, mode, ctime, inode."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from storekit.errors import NotFoundError
from storekit.store import Store
from storekit.tier.fingerprint import fingerprint_of


def _touch(unit: Path) -> None:
    os.utime(unit / "a.bin")


def _chmod(unit: Path) -> None:
    (unit / "a.bin").chmod(0o600)


def _copy_back(unit: Path) -> None:  # same bytes, mtime kept (`cp -p`): only the inode tells
    shutil.copy2(unit / "a.bin", unit / "a.tmp")
    os.replace(unit / "a.tmp", unit / "a.bin")


def _add(unit: Path) -> None:
    (unit / "sub" / "new.bin").write_bytes(b"")


def _remove(unit: Path) -> None:
    (unit / "sub" / "b.bin").unlink()


@pytest.mark.parametrize("change", [_touch, _chmod, _copy_back, _add, _remove])
def test_every_change_changes_the_digest(local_store: Store, change: Callable[[Path], None]) -> None:
    unit = Path(local_store.root) / "checkpoints/run_001/step_1"
    (unit / "sub").mkdir(parents=True)
    (unit / "a.bin").write_bytes(b"a" * 10)
    (unit / "sub" / "b.bin").write_bytes(b"b" * 5)
    os.utime(unit / "a.bin", (1_000_000, 1_000_000))
    before = fingerprint_of(local_store, "checkpoints/run_001/step_1")
    assert [f.rel for f in before.files] == ["a.bin", "sub", "sub/b.bin"]
    assert (before.bytes, before.file_count) == (15, 2)
    assert fingerprint_of(local_store, "checkpoints/run_001/step_1").digest == before.digest
    change(unit)
    after = fingerprint_of(local_store, "checkpoints/run_001/step_1")
    assert after.digest != before.digest
    assert before.differences(after)  # said in words for the skip reason


def test_a_single_file_unit_and_a_missing_one(local_store: Store) -> None:
    path = Path(local_store.root) / "model.ckpt"
    path.write_bytes(b"x" * 7)
    fp = fingerprint_of(local_store, "model.ckpt")
    assert [(f.rel, f.size) for f in fp.files] == [("", 7)]
    with pytest.raises(NotFoundError):
        fingerprint_of(local_store, "gone")
