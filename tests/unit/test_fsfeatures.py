"""The quota/striping interface's backend choice, and its Lustre backend against recorded `lfs` output
(no Lustre runs here: the commands it issues are recorded, each answered with lfs's own output format).
The CephFS backend runs on the real CephFS: tests/integration/test_cephfs.py."""

from __future__ import annotations

import errno
from collections.abc import Sequence

import pytest

from storekit.errors import NoSpaceError, storage_error
from storekit.fsfeatures import CephFs, DirSettings, DirUsage, Lustre, backend_for, project_id
from storekit.mounts import parse_mountinfo

MNT = "/lustre/fs1"
PARENT = f"{MNT}/storage"
DIR = f"{PARENT}/checkpoints"

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


def lfs_state(count: str, size: str, pid: int, quota: str, parent_pid: int = 0) -> RecordedLfs:
    return RecordedLfs(
        {
            ("lfs", "getstripe", "-d", "-c"): f"{count}\n",
            ("lfs", "getstripe", "-d", "-S"): f"{size}\n",
            ("lfs", "project", "-d", PARENT): f"    {parent_pid} - {PARENT}\n",
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


def lfs_quota_line(mount: str, kb_used: int, kb_limit: int, files: int, file_limit: int) -> str:
    """One line of `lfs quota` as lfs.c's print_quota writes it: a mount point longer than 15
    characters on a line of its own, the values on the next (the '*' after a value over its limit)."""
    head = f"{mount}\n{'':15s}" if len(mount) > 15 else f"{mount:>15s}"
    over = "*" if kb_limit and kb_used >= kb_limit else " "
    blocks = f" {kb_used:>7}{over} {0:>6} {kb_limit:>7} {'-':>7}"  # " %7s%c %6s %7s %7s"
    inodes = f" {files:>7}  {0:>6} {file_limit:>7} {'-':>7}"
    return head + blocks + inodes + "\n"


class ProjectLfs:
    """A Lustre of directories with project ids (`projects`, path -> id; other paths do not exist)
    and project quotas (`quotas`, id -> (kb used, kb limit, files, file limit)); set* commands
    change them as lfs would. Keeps the commands in order."""

    def __init__(
        self, mount: str, projects: dict[str, int], quotas: dict[int, tuple[int, int, int, int]]
    ) -> None:
        self.mount, self.projects, self.quotas = mount, projects, quotas
        self.calls: list[list[str]] = []

    def __call__(self, cmd: Sequence[str]) -> str:
        self.calls.append(list(cmd))
        match list(cmd):
            case ["lfs", "project", "-d", path] if path in self.projects:
                return f"{self.projects[path]:5d} P {path}\n"
            case ["lfs", "project", "-p", pid, "-s", "-r", path]:
                self.projects.update(
                    {p: int(pid) for p in self.projects if p == path or p.startswith(path + "/")}
                )
                return ""
            case ["lfs", "quota", "-p", pid, mount] if mount == self.mount:
                used, limit, files, flimit = self.quotas.get(int(pid), (0, 0, 0, 0))
                return QUOTA_HEADER.format(pid=pid) + lfs_quota_line(mount, used, limit, files, flimit)
            case ["lfs", "setquota", "-p", pid, "-B", kb, "-I", inodes, _]:
                used, _, files, _ = self.quotas.get(int(pid), (0, 0, 0, 0))
                self.quotas[int(pid)] = (used, int(kb), files, int(inodes))
                return ""
            case ["lfs", "getstripe", *_]:
                return "1\n"
        raise OSError(5, f"{' '.join(cmd)} failed: No such file or directory")


LONG_MNT = "/lustre/scratch-fs1"  # 19 characters: lfs wraps its quota line
LONG_DIR = f"{LONG_MNT}/storage/datasets"


def test_lustre_reads_a_quota_line_wrapped_under_a_long_mount_point() -> None:
    lfs = ProjectLfs(
        LONG_MNT, {f"{LONG_MNT}/storage": 0, LONG_DIR: 4242}, {4242: (2048, 1048576, 512, 100000)}
    )
    assert lfs(["lfs", "quota", "-p", "4242", LONG_MNT]).splitlines()[2] == LONG_MNT  # as lfs prints it
    fs = Lustre(LONG_MNT, run=lfs)
    have = fs.read(LONG_DIR)
    assert (have.quota_bytes, have.quota_files) == (1048576 * 1024, 100000)
    assert fs.usage(LONG_DIR) == DirUsage(bytes=2048 * 1024, files=512, dirs=0)


def test_a_byte_quota_is_compared_in_the_kib_lustre_keeps() -> None:
    """A quota that is not a whole number of KiB is set rounded up; afterwards nothing differs."""
    lfs = ProjectLfs(MNT, {PARENT: 0, DIR: 0}, {})
    fs = Lustre(MNT, run=lfs)
    want = DirSettings(quota_bytes=10_000_000, quota_files=5000)
    assert [c for c in fs.apply(DIR, want).done if "setquota" in c] == [
        f"lfs setquota -p {project_id(DIR)} -B 9766 -I 5000 {MNT}"
    ]
    assert fs.differences(DIR, want) == []  # 9766 KiB held for 10,000,000 bytes: the same quota
    assert fs.apply(DIR, want).done == []


def test_an_inherited_project_is_the_parent_trees_never_the_areas() -> None:
    """A site's project over a whole tree (here id 500, a group's 50 TiB): the area that inherited it
    has no quota of its own; init gives it its own project instead of changing the group's quota."""
    group = (40 << 30, 50 << 30, 9_000_000, 0)  # KiB: 40 TiB used of 50 TiB
    lfs = ProjectLfs(MNT, {MNT: 0, f"{MNT}/storage": 500, PARENT + "/x": 500, DIR: 500}, {500: group})
    fs = Lustre(MNT, run=lfs)
    assert (fs.read(DIR).quota_bytes, fs.read(DIR).quota_files) == (None, None)
    assert fs.usage(DIR) is None  # the group's usage is not the area's: walk instead
    want = DirSettings(quota_bytes=1 << 30, quota_files=1000)
    assert [d.setting for d in fs.differences(DIR, want)] == ["quota_bytes", "quota_files"]
    fs.apply(DIR, want)
    own = project_id(DIR)
    assert lfs.quotas[500] == group  # the group's quota untouched
    assert not [c for c in lfs.calls if "500" in c and c[1] in ("setquota", "project")]
    assert lfs.projects[DIR] == own and lfs.projects[PARENT + "/x"] == 500
    assert fs.read(DIR).quota_bytes == 1 << 30 and fs.differences(DIR, want) == []


def test_edquot_on_lustre_names_the_area_whose_project_quota_is_full(monkeypatch: pytest.MonkeyPatch) -> None:
    lfs = ProjectLfs(MNT, {MNT: 0, PARENT: 0, DIR: 77, f"{DIR}/run_1": 77}, {77: (1 << 20, 1 << 20, 3, 0)})
    monkeypatch.setattr("storekit.fsfeatures.backend_for", lambda path: Lustre(MNT, run=lfs))
    failed = OSError(errno.EDQUOT, "Disk quota exceeded", f"{DIR}/run_1/step_1/model.pt")
    err = storage_error(failed, f"checkpoint {DIR}/run_1/step_1")
    assert isinstance(err, NoSpaceError) and err.exit_code == 6
    assert (
        err.message
        == f"checkpoint {DIR}/run_1/step_1: the quota of area checkpoints ({DIR}) is full: 1.0 GiB"
    )
