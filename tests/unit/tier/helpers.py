"""A checkpoint-like unit with every kind of entry, exact snapshots of trees, and crash runs by fork."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import stat
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storekit import faults
from storekit.config import SiteConfig, TierConfig
from storekit.durable import TMP_MARK, is_tombstone
from storekit.stubs import Stub

MiB = 1024 * 1024
T0 = 1_700_000_000_123_456_789  # mtimes set exactly (ns) so a restore that rounds them is caught

# a stub as `tier --archive` writes it (the plan and stub tests read it back)
ARCHIVED = Stub(
    unit="step_000050",
    unit_kind="checkpoint",
    is_file=False,
    writer="torch-dcp",
    step=50,
    action="archive",
    to_tier="vault",
    to_path="checkpoints/run_001/step_000050",
    manifest="checkpoints/run_001/step_000050.storekit-archive.json",
    manifest_xxh3="0123456789abcdef0123456789abcdef",
    bytes=4096,
    files=3,
    dirs=1,
    unit_id="00112233aabbccdd",
    at="2026-11-01T00:00:00Z",
)


def make_unit(unit: Path, *, big: int = 0, seed: int = 0) -> None:
    """Files of several sizes and modes, an empty file, an empty dir, nested dirs, a symlink, a marker."""
    rng = random.Random(seed)
    unit.mkdir(parents=True)
    (unit / "model").mkdir()
    (unit / "optim" / "shard").mkdir(parents=True)
    (unit / "empty_dir").mkdir()
    files = {
        "model/rank0.pt": rng.randbytes(70_001),
        "model/rank1.pt": rng.randbytes(65_536),
        "optim/shard/state.bin": rng.randbytes(1234),
        "empty.bin": b"",
        ".metadata": b'{"step": 100}\n',
        "manifest.json": b'{"kind": "checkpoint"}\n',
        "commit_success.txt": b"",
    }
    if big:
        files["big.bin"] = rng.randbytes(big)
    for i, (rel, data) in enumerate(sorted(files.items())):
        (unit / rel).write_bytes(data)
        os.chmod(unit / rel, (0o600, 0o644, 0o444, 0o640)[i % 4])
    os.symlink("model/rank0.pt", unit / "link_to_rank0")
    os.chmod(unit / "optim", 0o750)
    for i, path in enumerate(sorted(unit.rglob("*"), key=lambda p: -len(p.parts))):
        os.utime(path, ns=(T0 + i * 1_000_003, T0 + i * 1_000_003), follow_symlinks=False)
    os.utime(unit, ns=(T0 - 7, T0 - 7))


def make_small_unit(unit: Path, *, big: int, seed: int = 0) -> None:
    """Fewer files (each costs requests against a gateway): one multipart-sized, one small, one
    empty file, an empty dir, a symlink."""
    rng = random.Random(seed)
    (unit / "model").mkdir(parents=True)
    (unit / "empty_dir").mkdir()
    (unit / "big.bin").write_bytes(rng.randbytes(big))
    (unit / "model/rank0.pt").write_bytes(rng.randbytes(3000))
    (unit / "empty.bin").write_bytes(b"")
    os.chmod(unit / "model/rank0.pt", 0o600)
    os.symlink("model/rank0.pt", unit / "link")
    for i, path in enumerate(sorted(unit.rglob("*"), key=lambda p: -len(p.parts))):
        os.utime(path, ns=(T0 + i, T0 + i), follow_symlinks=False)


Snapshot = dict[str, tuple[object, ...]]


def snapshot(root: Path) -> Snapshot:
    """Every entry below `root` (and root itself): type, mode, mtime_ns, bytes or link target."""
    out: Snapshot = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        rel = path.relative_to(root).as_posix()
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(path), st.st_mtime_ns)
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_mtime_ns)
        else:
            out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_mtime_ns, path.read_bytes())
    return out


def leftovers(root: Path) -> list[str]:
    """Temp copies and tombstones anywhere below `root` (what a crash may leave, gc must remove)."""
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if TMP_MARK in p.name or is_tombstone(p.name)
    )


def unfinished(journal: Path) -> list[str]:
    """What a journal directory holds besides its history (actions.log), verification records and
    the site's plan key: the journals of moves not finished (empty once every move is done or
    rolled back)."""
    return sorted(n for n in os.listdir(journal) if n not in ("actions.log", "verified", "plan.key"))


def fork_with_faults(fn: Callable[[], object], spec: str, *, events: Path | None = None) -> int:
    """Start `fn` in a forked child with STOREKIT_FAULTS=`spec` (pause points meet their events in
    `events`); its pid. The child never returns into pytest: exit 0 when `fn` finished, 3 when it
    raised (traceback printed)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.environ[faults.ENV] = spec
            if events is not None:
                os.environ[faults.DIR_ENV] = str(events)
            faults.reset()
            fn()
        except BaseException:
            traceback.print_exc()
            code = 3
        finally:
            os._exit(code)
    return pid


def run_killed(fn: Callable[[], object], spec: str) -> bool:
    """Run `fn` in a forked child with STOREKIT_FAULTS=`spec`; True if the fault killed it, False if it
    finished (the point was never reached). Any other outcome fails the test."""
    _, status = os.waitpid(fork_with_faults(fn, spec), 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, f"{spec}: the child failed (exit {os.WEXITSTATUS(status)})"
    return False


def child_says(body: Callable[[], str]) -> str:
    """What `body` returns, run in a forked child (no fault armed): what it installs there (hooks,
    recorders) never reaches the test's own process."""
    r, w = os.pipe()

    def run() -> None:
        os.close(r)
        os.write(w, body().encode())

    pid = fork_with_faults(run, "never-reached-point")
    os.close(w)
    with os.fdopen(r) as fh:
        text = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    return text


def point_names(fn: Callable[[], object]) -> list[str]:
    """The fault points an uninterrupted `fn` reaches, in order (recorded in a forked child): the
    N-th name is what `*@N=kill` kills at."""

    def recorded() -> str:
        seen: list[str] = []
        real = faults.point

        def record(name: str) -> None:
            seen.append(name)
            real(name)

        faults.__dict__["point"] = record  # every caller looks it up as faults.point
        fn()
        return "\n".join(seen)

    text = child_says(recorded)
    return text.split("\n") if text else []


def count_points(fn: Callable[[], object]) -> int:
    """How many fault points an uninterrupted `fn` reaches."""
    return len(point_names(fn))


def posix_site(burst: Path, parallel: Path) -> SiteConfig:
    """A site with a node-local burst tier and a parallel file system tier at these directories."""
    tiers = {
        "burst": TierConfig(name="burst", url=burst.as_uri(), role="burst"),
        "parallel": TierConfig(name="parallel", url=parallel.as_uri(), role="parallel"),
    }
    return SiteConfig(source="<test>", tiers=tiers, default_tier="parallel")


def memory_dir(tmp_path: Path) -> Path:
    """A fresh directory on tmpfs when there is one: a SIGKILL keeps the page cache, so crash tests
    lose nothing by skipping the disk's fsyncs (hundreds per test), and run in seconds."""
    import tempfile

    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return Path(tempfile.mkdtemp(prefix="storekit-tier-", dir="/dev/shm"))
    return tmp_path


@contextlib.contextmanager
def small_tmpfs() -> Iterator[Path]:
    """A 512 KiB tmpfs: a tier that fills up (the test is skipped where it cannot be mounted)."""
    where = Path(tempfile.mkdtemp(prefix="storekit-full-"))
    ran = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(where)], capture_output=True
    )
    if ran.returncode != 0:
        os.rmdir(where)
        pytest.skip(f"cannot mount a small tmpfs here: {ran.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)
        os.rmdir(where)


def fill(where: Path, keep: int = 0) -> Path:
    """Take the free space of `where` but `keep` bytes (another user's file, someone-else.bin)."""
    filler = where / "someone-else.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while os.statvfs(where).f_bavail * os.statvfs(where).f_frsize > keep:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass  # full
    finally:
        os.close(fd)
    return filler
