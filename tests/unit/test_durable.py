"""Local files that appear whole: storekit.durable."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from storekit.durable import TMP_MARK, write_file_atomic


def test_replaces_the_file_with_all_of_the_data(tmp_path: Path) -> None:
    dest = tmp_path / "plan.json"
    dest.write_bytes(b"old contents, longer than the new ones")
    write_file_atomic(dest, b"new")
    assert dest.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["plan.json"]


def test_mode_is_set_else_the_umask_decides(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        write_file_atomic(tmp_path / "private", b"x")
        write_file_atomic(tmp_path / "shared.prom", b"x", mode=0o644)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "shared.prom").stat().st_mode) == 0o644


def test_a_failed_rename_leaves_no_temp_file_and_the_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.mkdir()
    (target / "inside").write_text("keep")
    with pytest.raises(OSError):
        write_file_atomic(target, b"data")  # a file cannot replace a non-empty directory
    assert (target / "inside").read_text() == "keep"
    assert not [p for p in tmp_path.iterdir() if TMP_MARK in p.name]
