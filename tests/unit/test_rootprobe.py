"""The deadline probe's choices; the deadline itself is tested against a stalled MDS on the real
CephFS (tests/integration/test_cephfs.py::test_a_stalled_mds_is_a_tier_down_not_a_hang)."""

from __future__ import annotations

from pathlib import Path

import pytest

from storekit import rootprobe
from storekit.mounts import parse_mountinfo

TABLE = parse_mountinfo(
    "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
    "40 22 0:50 / /shared rw - fuse.ceph-fuse ceph-fuse rw\n"
    "41 22 0:51 / /lustre rw - lustre 10.0.0.2@tcp:/fs1 rw\n"
)


def test_the_mount_is_found_by_name_without_touching_the_path() -> None:
    assert rootprobe.mount_by_name("/shared/storage/../storage/x", TABLE).point == "/shared"  # type: ignore[union-attr]
    assert rootprobe.mount_by_name("/sharedx/storage", TABLE).point == "/"  # type: ignore[union-attr]


def test_only_mounts_that_can_stall_are_probed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    probed: list[str] = []
    monkeypatch.setattr(rootprobe, "_in_grandchild", lambda root, s: probed.append(root) or 0)
    for root in ("/home/u/storage", "/shared/storage", "/lustre/storage"):
        rootprobe.guard_root(root, "t", table=TABLE)
    assert probed == ["/shared/storage", "/lustre/storage"]
    monkeypatch.setenv(rootprobe.ENV, "0")  # off
    rootprobe.guard_root("/shared/storage", "t", table=TABLE)
    assert len(probed) == 2


def test_a_root_that_answers_passes_and_its_errors_are_left_to_the_caller(tmp_path: Path) -> None:
    assert rootprobe._in_grandchild(str(tmp_path), 30) == 0
    assert rootprobe._in_grandchild(str(tmp_path / "no" / "such"), 30) == 2  # ENOENT: not "down"
