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


def _tree(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "a.bin").write_bytes(b"a" * 100)
    (root / "sub" / "b.bin").write_bytes(b"b")


def test_remove_tree_leaves_nothing(tmp_path: Path) -> None:
    from storekit.durable import remove_tree

    _tree(tmp_path / "step_000100")
    (tmp_path / "keep").write_bytes(b"k")
    remove_tree(tmp_path / "step_000100")
    remove_tree(tmp_path / "missing")  # nothing there: not an error
    assert os.listdir(tmp_path) == ["keep"]


def test_a_crash_mid_delete_never_leaves_a_partial_tree_under_its_name(tmp_path: Path) -> None:
    import subprocess
    import sys

    from storekit.durable import is_tombstone, purge_tombstones

    _tree(tmp_path / "step_000100")
    code = f"from storekit.durable import remove_tree; remove_tree({str(tmp_path / 'step_000100')!r})"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env["STOREKIT_FAULTS"] = "durable.tombstoned=kill"
    proc = subprocess.run([sys.executable, "-c", code], env=env, timeout=60)
    assert proc.returncode == -9
    names = os.listdir(tmp_path)
    assert "step_000100" not in names
    assert len(names) == 1 and is_tombstone(names[0])
    assert purge_tombstones(tmp_path) == names
    assert os.listdir(tmp_path) == []


def test_purging_a_tombstone_another_cleaner_is_emptying_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from storekit import durable

    _tree(tmp_path / "step_000100")
    durable.remove_tree(tmp_path / "step_000100")  # sanity: the plain path
    _tree(tmp_path / "step_000200")
    os.rename(tmp_path / "step_000200", tmp_path / f".step_000200{durable.TOMBSTONE_MARK}x")
    real_unlink = os.unlink

    def racing_unlink(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        if str(path).endswith("a.bin"):  # the other cleaner removed it first
            real_unlink(path, *args, **kwargs)  # type: ignore[arg-type]
        real_unlink(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", racing_unlink)
    assert shutil.rmtree.avoids_symlink_attacks  # the fd-based rmtree, which calls os.unlink
    assert durable.purge_tombstones(tmp_path) == [f".step_000200{durable.TOMBSTONE_MARK}x"]
    assert os.listdir(tmp_path) == []
