"""The quota/striping interface's backend choice, and its Lustre backend against recorded `lfs` output
(no Lustre runs here: the commands it issues are recorded, each answered with lfs's own output format).
The CephFS backend runs on the real CephFS: tests/integration/test_cephfs.py."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from storekit.fsfeatures import CephFs, DirSettings, DirUsage, Lustre, backend_for, project_id
from storekit.mounts import parse_mountinfo

MNT = "/lustre/fs1"
DIR = f"{MNT}/storage/checkpoints"

# what lfs 2.15 prints for these commands (formats from lfs(1); values for this test)
QUOTA_HEADER = (
    "Disk quotas for prj {pid} (pid {pid}):\n"
    "     Filesystem  kbytes   quota   limit   grace   files   quota   limit   grace\n"
)
QUOTA_SET = QUOTA_HEADER + f"    {MNT}  1048577*       0  1048576       -     512       0   100000       -\n"
QUOTA_NONE = QUOTA_HEADER + f"    {MNT}       0       0       0       -       0       0       0       -\n"


class RecordedLfs:
    """Answers each lfs command with recorded output; keeps the commands in order."""

    def __init__(self, answers: dict[tuple[str, ...], str]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, cmd: Sequence[str]) -> str:
        self.calls.append(list(cmd))
        for prefix, out in self.answers.items():
            if tuple(cmd[: len(prefix)]) == prefix:
                return out
        return ""


def lfs_state(count: str, size: str, pid: int, quota: str) -> RecordedLfs:
    return RecordedLfs(
        {
            ("lfs", "getstripe", "-d", "-c"): f"{count}\n",
            ("lfs", "getstripe", "-d", "-S"): f"{size}\n",
            ("lfs", "project", "-d"): f"    {pid} P {DIR}\n",
            ("lfs", "quota", "-p"): quota.format(pid=pid),
        }
    )


def test_lustre_reads_striping_and_the_project_quota() -> None:
    lfs = lfs_state("8", "16777216", 4242, QUOTA_SET)
    fs = Lustre(MNT, run=lfs)
    assert fs.read(DIR) == DirSettings(
        quota_bytes=1048576 * 1024, quota_files=100000, stripe_count=8, stripe_size=16 << 20
    )
    # usage in O(1): the project's accounting ('*' marks a project over its limit)
    assert fs.usage(DIR) == DirUsage(bytes=1048577 * 1024, files=512, dirs=0)


def test_lustre_applies_what_differs_and_reports_it() -> None:
    lfs = lfs_state("1", "1048576", 0, QUOTA_NONE)  # no project yet: one is derived from the path
    fs = Lustre(MNT, run=lfs)
    want = DirSettings(quota_bytes=10 << 30, quota_files=5000, stripe_count=-1, stripe_size=4 << 20)
    assert [d.setting for d in fs.differences(DIR, want)] == list(want.declared())
    applied = fs.apply(DIR, want)
    pid = str(project_id(DIR))
    writes = [c for c in lfs.calls if c[1] in ("setstripe", "setquota") or c[:3] == ["lfs", "project", "-p"]]
    assert writes == [
        ["lfs", "setstripe", "-c", "-1", "-S", str(4 << 20), DIR],
        ["lfs", "project", "-p", pid, "-s", "-r", DIR],
        ["lfs", "setquota", "-p", pid, "-B", str(10 << 20), "-I", "5000", MNT],
    ]
    assert applied.done == [" ".join(c) for c in writes] and not applied.skipped


def test_lustre_sets_nothing_that_already_matches() -> None:
    lfs = lfs_state("8", "16777216", 4242, QUOTA_SET)
    want = DirSettings(quota_bytes=1048576 * 1024, quota_files=100000, stripe_count=8, stripe_size=16 << 20)
    assert Lustre(MNT, run=lfs).apply(DIR, want).done == []
    assert not [c for c in lfs.calls if c[1] in ("setstripe", "setquota")]


def test_the_backend_is_chosen_by_the_mount_type(monkeypatch: pytest.MonkeyPatch) -> None:
    table = parse_mountinfo(
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "40 22 0:50 / /cephfs rw - fuse.ceph-fuse ceph-fuse rw,user_id=0\n"
        "41 22 0:51 / /kcephfs rw - ceph 10.0.0.1:/ rw,name=admin\n"
        f"42 22 0:52 / {MNT} rw - lustre 10.0.0.2@tcp:/fs1 rw,flock\n"
    )
    assert isinstance(backend_for("/cephfs/storage/x", table=table), CephFs)
    assert isinstance(backend_for("/kcephfs/storage", table=table), CephFs)
    assert backend_for("/home/u/storage", table=table) is None  # ext4: no quota interface
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert backend_for(DIR, table=table) is None  # Lustre without the lfs tool
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    lustre = backend_for(DIR, table=table)
    assert isinstance(lustre, Lustre) and lustre.mount_point == MNT
