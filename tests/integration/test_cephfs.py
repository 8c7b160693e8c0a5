"""storekit on the real CephFS (scripts/services/cephfs-up.sh: one file system, two ceph-fuse mounts
standing for two nodes): the layout's quotas and striping applied for real and checked, usage read from
the file system's recursive statistics, a full quota as a clean stop, and a stalled MDS as a tier that
is down instead of a command that hangs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TwoMounts

pytestmark = pytest.mark.cephfs

LAYOUT = """
[layout]
name = "shared"
[areas.datasets]
mode = "0755"
quota = "8MiB"
quota_files = 1000
striping = { count = 4, size = "1MiB" }
[areas.scratch]
mode = "1777"
striping = { count = -1, size = "4MiB" }
"""


def xattr(path: Path, name: str) -> str:
    return os.getxattr(path, name).decode()


@pytest.fixture
def laid_out(cephfs: TwoMounts, sk: Any) -> TwoMounts:
    (cephfs.one / "shared.toml").write_text(LAYOUT)
    ran = sk(cephfs.one, "init", "--layout", "shared.toml", "--json")
    assert ran.code == 0, ran.stderr
    return cephfs


def test_init_sets_quotas_and_striping_and_says_so(cephfs: TwoMounts, sk: Any) -> None:
    (cephfs.one / "shared.toml").write_text(LAYOUT)
    dry = sk(cephfs.one, "init", "--layout", "shared.toml", "--dry-run", "--json").json()
    want = "cephfs: quota_bytes=8388608 quota_files=1000 stripe_count=4 stripe_size=1048576"
    assert {"action": "fs-set", "path": "datasets", "mode": None, "detail": want} in dry["actions"]
    assert any("scratch: stripe_count=-1 has no cephfs equivalent" in s for s in dry["skipped"])
    assert not (cephfs.one / "storage").exists()  # a dry run writes nothing

    ran = sk(cephfs.one, "init", "--layout", "shared.toml", "--json")
    assert ran.code == 0, ran.stderr
    assert {"action": "fs-set", "path": "datasets", "mode": None, "detail": want} in ran.json()["actions"]
    # seen from the other node: the file system holds them
    ds = cephfs.two / "storage" / "datasets"
    assert xattr(ds, "ceph.quota.max_bytes") == "8388608"
    assert xattr(ds, "ceph.quota.max_files") == "1000"
    assert xattr(ds, "ceph.dir.layout.stripe_count") == "4"
    assert xattr(ds, "ceph.dir.layout.stripe_unit") == "1048576"
    (ds / "new.bin").write_bytes(b"x")  # a new file gets the directory's striping
    assert xattr(ds / "new.bin", "ceph.file.layout.stripe_count") == "4"
    again = sk(cephfs.one, "init", "--layout", "shared.toml", "--json").json()
    assert again["actions"] == []  # idempotent: nothing differs


def test_layout_check_reports_where_the_file_system_differs(laid_out: TwoMounts, sk: Any) -> None:
    assert sk(laid_out.one, "layout", "check", "--layout", "shared.toml", "--json").code == 0
    ds = laid_out.two / "storage" / "datasets"
    os.setxattr(ds, "ceph.quota.max_bytes", b"1000000000")  # someone changed it on another node
    ran = sk(laid_out.one, "layout", "check", "--layout", "shared.toml", "--json")
    assert ran.code == 4, ran.stderr
    found = [f for f in ran.json()["tiers"][0]["findings"] if f["rule"] == "fs-settings"]
    assert found == [
        {
            "rule": "fs-settings",
            "path": "datasets",
            "message": "cephfs: quota_bytes is 1000000000, the layout says 8388608",
        }
    ]
    fixed = sk(laid_out.one, "init", "--layout", "shared.toml", "--json").json()
    assert [a["detail"] for a in fixed["actions"]] == ["cephfs: quota_bytes=8388608"]
    assert xattr(ds, "ceph.quota.max_bytes") == "8388608"
