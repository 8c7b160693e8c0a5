"""Quotas, striping and recursive usage of a directory, the way its parallel file system keeps them.

One interface, a backend per file system, chosen by the mount's type (mountinfo):

    CephFS  (ceph, fuse.ceph-fuse)  xattrs: ceph.quota.max_bytes/max_files, ceph.dir.layout,
                                    ceph.dir.rbytes/rfiles/rsubdirs (usage in O(1), not a walk)
    Lustre  (lustre)                `lfs setstripe` / `lfs getstripe`; quotas are project quotas
                                    (`lfs project -p ID -s DIR`, `lfs setquota -p ID`), which also
                                    give the directory's usage in O(1) (`lfs quota -p ID`); only a
                                    project of the directory's own counts, not one it inherited

Elsewhere (ext4, xfs, NFS, ...) there is no backend: the caller reports the declarations as skipped.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields

from storekit.mounts import Mount, deepest_mount, mount_table

CEPHFS_TYPES = frozenset({"ceph", "fuse.ceph-fuse", "fuse.ceph"})
LUSTRE_TYPES = frozenset({"lustre"})
CEPH_OBJECT_SIZE = 4 << 20  # CephFS's default object size; striping keeps objects at least this big


@dataclass(frozen=True)
class DirSettings:
    """What a directory has (or should have); None: not set (inherited or unlimited)."""

    quota_bytes: int | None = None
    quota_files: int | None = None
    stripe_count: int | None = None  # -1: all OSTs (Lustre)
    stripe_size: int | None = None  # bytes written to one stripe before the next (CephFS stripe_unit)

    def declared(self) -> dict[str, int]:
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}


@dataclass(frozen=True)
class Difference:
    setting: str  # quota_bytes | quota_files | stripe_count | stripe_size
    want: int
    have: int | None

    def describe(self) -> str:
        return (
            f"{self.setting} is {'not set' if self.have is None else self.have}, the layout says {self.want}"
        )


@dataclass(frozen=True)
class DirUsage:
    """A directory tree's totals as the file system keeps them (no walk)."""

    bytes: int
    files: int
    dirs: int


@dataclass
class Applied:
    done: list[str]  # what was set, e.g. "ceph.quota.max_bytes=10000000"
    skipped: list[str]  # what could not be, and why


@dataclass(frozen=True)
class QuotaRoot:
    path: str  # the directory whose quota was hit (an area, where init set it)
    max_bytes: int | None
    max_files: int | None


Runner = Callable[[Sequence[str]], str]  # runs a command, returns its stdout; raises OSError on failure


class FsBackend(ABC):
    fs: str

    @abstractmethod
    def read(self, path: str) -> DirSettings: ...

    @abstractmethod
    def apply(self, path: str, want: DirSettings) -> Applied: ...

    def usage(self, path: str) -> DirUsage | None:
        """Recursive totals in O(1) where the file system keeps them; None: walk instead."""
        return None

    def differences(self, path: str, want: DirSettings) -> list[Difference]:
        return self.compare(self.read(path), want)

    def compare(self, have: DirSettings, want: DirSettings) -> list[Difference]:
        return [
            Difference(name, value, getattr(have, name))
            for name, value in want.declared().items()
            if getattr(have, name) != self.held(name, value) and self.supports(name, value)
        ]

    def supports(self, setting: str, value: int) -> bool:
        return True

    def held(self, setting: str, value: int) -> int:
        """What the file system keeps when `value` is set (its units may be coarser than bytes)."""
        return value

    def quota_root(self, path: str) -> QuotaRoot | None:
        """The nearest directory at or above `path` whose quota this file system enforces."""
        return None


# -- CephFS ------------------------------------------------------------------------------------------
def _xattr_int(path: str, name: str) -> int | None:
    try:
        raw = os.getxattr(path, name)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return None
        raise
    return int(raw.decode().strip() or "0")


class CephFs(FsBackend):
    fs = "cephfs"

    def read(self, path: str) -> DirSettings:
        qb, qf = _xattr_int(path, "ceph.quota.max_bytes"), _xattr_int(path, "ceph.quota.max_files")
        return DirSettings(
            quota_bytes=qb or None,  # 0 is "no quota"
            quota_files=qf or None,
            stripe_count=_xattr_int(path, "ceph.dir.layout.stripe_count"),  # ENODATA: inherited
            stripe_size=_xattr_int(path, "ceph.dir.layout.stripe_unit"),
        )

    def supports(self, setting: str, value: int) -> bool:
        return not (setting == "stripe_count" and value < 1)

    def apply(self, path: str, want: DirSettings) -> Applied:
        out = Applied([], [])
        have = self.read(path)
        for setting, xattr in (
            ("quota_bytes", "ceph.quota.max_bytes"),
            ("quota_files", "ceph.quota.max_files"),
        ):
            value = getattr(want, setting)
            if value is not None and getattr(have, setting) != value:
                os.setxattr(path, xattr, str(value).encode())
                out.done.append(f"{xattr}={value}")
        count, size = want.stripe_count, want.stripe_size
        if count is not None and count < 1:
            out.skipped.append(f"stripe_count={count} (all OSTs) has no CephFS equivalent")
        elif (count, size) != (None, None) and (have.stripe_count, have.stripe_size) != (count, size):
            unit = size or have.stripe_size or CEPH_OBJECT_SIZE
            count = count or have.stripe_count or 1
            # an object holds whole stripe units: the smallest multiple of the unit >= 4 MiB
            obj = unit * max(1, -(-CEPH_OBJECT_SIZE // unit))
            layout = f"stripe_unit={unit} stripe_count={count} object_size={obj}"
            os.setxattr(path, "ceph.dir.layout", layout.encode())
            out.done.append(f"ceph.dir.layout={layout}")
        return out

    def usage(self, path: str) -> DirUsage | None:
        size, files = _xattr_int(path, "ceph.dir.rbytes"), _xattr_int(path, "ceph.dir.rfiles")
        subdirs = _xattr_int(path, "ceph.dir.rsubdirs")
        if size is None or files is None:
            return None
        return DirUsage(bytes=size, files=files, dirs=max(0, (subdirs or 1) - 1))  # rsubdirs counts itself

    def quota_root(self, path: str) -> QuotaRoot | None:
        probe = os.path.abspath(path)
        while True:
            try:
                qb, qf = _xattr_int(probe, "ceph.quota.max_bytes"), _xattr_int(probe, "ceph.quota.max_files")
            except (OSError, ValueError):
                qb = qf = None
            if qb or qf:
                return QuotaRoot(probe, qb or None, qf or None)
            parent = os.path.dirname(probe)
            if parent == probe:
                return None
            probe = parent


# -- Lustre ------------------------------------------------------------------------------------------
LFS_TIMEOUT_S = 30


def run_lfs(cmd: Sequence[str]) -> str:
    """Run an `lfs` command; its stdout, or OSError naming the command and what it said."""
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=LFS_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise OSError(errno.ETIMEDOUT, f"{' '.join(cmd)} did not answer in {LFS_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise OSError(errno.EIO, f"{' '.join(cmd)} failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


def project_id(path: str) -> int:
    """A stable Lustre project id for a directory's quota (from its path, in 1..2^31-1)."""
    return zlib.crc32(os.path.abspath(path).encode()) % 0x7FFFFFFE + 1


class Lustre(FsBackend):
    fs = "lustre"

    def __init__(self, mount_point: str, run: Runner = run_lfs) -> None:
        self.mount_point = mount_point
        self.run = run

    def _int(self, text: str) -> int | None:
        text = text.strip()
        return int(text) if text.lstrip("-").isdigit() else None

    def _project(self, path: str) -> int | None:
        # `lfs project -d DIR`: "  1234 P DIR" (id, P when new entries inherit it)
        parts = self.run(["lfs", "project", "-d", path]).split()
        pid = self._int(parts[0]) if parts else None
        return pid or None

    def _own_project(self, path: str) -> int | None:
        """The directory's project id where it is its own, not inherited from its parent: a site's
        project over a whole tree (a group's quota) is that tree's, and setting or reading it for
        one area would change or report everyone's."""
        pid = self._project(path)
        here = os.path.abspath(path)
        if pid is None or here == os.path.abspath(self.mount_point):  # the file system's root: no parent
            return pid
        return None if self._project(os.path.dirname(here)) == pid else pid

    def _quota(self, pid: int) -> tuple[int | None, int | None, int, int]:
        """(byte limit, file limit, bytes used, files used) of a project: `lfs quota -p ID MNT`."""
        lines = self.run(["lfs", "quota", "-p", str(pid), self.mount_point]).splitlines()
        for i, line in enumerate(lines):
            cols = line.split()
            if not cols or cols[0] != self.mount_point:
                continue
            # lfs prints a mount point longer than 15 characters on a line of its own, the values below
            values = cols[1:] if len(cols) > 1 else (lines[i + 1].split() if i + 1 < len(lines) else [])
            if len(values) < 8:
                break
            # kbytes quota limit grace files quota limit grace ('*': over the limit, [n]: inaccurate)
            kb_used, kb_limit, files, file_limit = (
                int(values[k].rstrip("*").strip("[]")) for k in (0, 2, 4, 6)
            )
            return (kb_limit * 1024 or None, file_limit or None, kb_used * 1024, files)
        raise OSError(errno.EIO, f"lfs quota -p {pid} {self.mount_point}: no line for the file system")

    def held(self, setting: str, value: int) -> int:
        return -(-value // 1024) * 1024 if setting == "quota_bytes" else value  # limits in KiB

    def read(self, path: str) -> DirSettings:
        count = self._int(self.run(["lfs", "getstripe", "-d", "-c", path]))
        size = self._int(self.run(["lfs", "getstripe", "-d", "-S", path]))
        pid = self._own_project(path)
        qb, qf = (None, None) if pid is None else self._quota(pid)[:2]
        return DirSettings(quota_bytes=qb, quota_files=qf, stripe_count=count, stripe_size=size)

    def apply(self, path: str, want: DirSettings) -> Applied:
        out = Applied([], [])
        pending = {d.setting for d in self.compare(self.read(path), want)}
        if pending & {"stripe_count", "stripe_size"}:
            cmd = ["lfs", "setstripe"]
            cmd += ["-c", str(want.stripe_count)] if want.stripe_count is not None else []
            cmd += ["-S", str(want.stripe_size)] if want.stripe_size is not None else []
            self.run([*cmd, path])
            out.done.append(" ".join([*cmd, path]))
        if pending & {"quota_bytes", "quota_files"}:
            pid = self._own_project(path) or project_id(path)  # never the parent tree's project
            self.run(["lfs", "project", "-p", str(pid), "-s", "-r", path])
            cmd = ["lfs", "setquota", "-p", str(pid)]
            if want.quota_bytes is not None:  # limits in KiB, rounded up
                cmd += ["-B", f"{-(-want.quota_bytes // 1024)}"]
            if want.quota_files is not None:
                cmd += ["-I", str(want.quota_files)]
            self.run([*cmd, self.mount_point])
            out.done.append(f"lfs project -p {pid} -s -r {path}")
            out.done.append(" ".join([*cmd, self.mount_point]))
        return out

    def usage(self, path: str) -> DirUsage | None:
        pid = self._own_project(path)
        if pid is None:
            return None
        _, _, used, files = self._quota(pid)
        return DirUsage(bytes=used, files=files, dirs=0)  # a project counts inodes, not dirs apart

    def quota_root(self, path: str) -> QuotaRoot | None:
        probe = os.path.abspath(path)
        top = os.path.abspath(self.mount_point)
        while probe == top or probe.startswith(top.rstrip("/") + "/"):
            try:
                pid = self._own_project(probe)
                qb, qf = (None, None) if pid is None else self._quota(pid)[:2]
            except (OSError, ValueError):  # not created yet, or lfs failed: look further up
                qb = qf = None
            if qb or qf:
                return QuotaRoot(probe, qb, qf)
            if probe == top:
                return None
            probe = os.path.dirname(probe)
        return None


def backend_for(path: str, *, table: Iterable[Mount] | None = None) -> FsBackend | None:
    """The backend of the file system holding `path` (created or not); None where
    storekit knows no quota/striping interface (then the layout's declarations are skipped)."""
    mount = deepest_mount(path, mount_table() if table is None else table)
    if mount is None:
        return None
    if mount.fs_type in CEPHFS_TYPES:
        return CephFs()
    if mount.fs_type in LUSTRE_TYPES and shutil.which("lfs"):
        return Lustre(mount.point)
    return None


def quota_root(path: str) -> QuotaRoot | None:
    """The nearest directory at or above `path` with a quota of its own (asked after an EDQUOT, to
    name which quota was full): a CephFS quota xattr, or on Lustre a directory's own project quota;
    None where none is found (a user or group quota, or a file system without directory quotas)."""
    backend = backend_for(path)
    return (backend if isinstance(backend, Lustre) else CephFs()).quota_root(path)
