"""storekit on the real CephFS (scripts/services/cephfs-up.sh: one file system, two ceph-fuse mounts
standing for two nodes): the layout's quotas and striping applied for real and checked, usage read from
the file system's recursive statistics, a full quota as a clean stop, and a stalled MDS as a tier that
is down instead of a command that hangs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Ran, TwoMounts, run_storekit, start_storekit
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl

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


def settled(path: Path, want_bytes: int, want_files: int) -> None:
    """Wait until the MDS has propagated the recursive statistics of `path` (rstats are updated
    lazily, seconds after the writes): a condition with a bound, not a sleep."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (int(xattr(path, "ceph.dir.rbytes")), int(xattr(path, "ceph.dir.rfiles"))) == (
            want_bytes,
            want_files,
        ):
            return
        time.sleep(0.2)
    raise AssertionError(f"rstats of {path} never reached {want_bytes} bytes, {want_files} files")


def write_tree(root: Path, files: int, size: int) -> int:
    for i in range(files):
        sub = root / f"part-{i % 3}" / "deep"
        sub.mkdir(parents=True, exist_ok=True)
        with open(sub / f"f{i}.bin", "wb") as fh:
            fh.write(bytes([i % 251]) * (size + i))
            os.fsync(fh.fileno())  # flushed to the MDS: its rstats see the size
    return sum(size + i for i in range(files))


@pytest.mark.slow  # ~7 s: the MDS propagates sizes to the directories' rstats 5-7 s after the writes
def test_status_reads_usage_and_quota_from_the_file_system(
    laid_out: TwoMounts, sk: Any, promtool: Any
) -> None:
    total = write_tree(laid_out.one / "storage" / "datasets", 30, 1000)
    settled(laid_out.two / "storage" / "datasets", total, 30)
    ran = sk(laid_out.two, "status", "--layout", "shared.toml", "--json", "--prometheus", "sk.prom")
    assert ran.code == 0, ran.stderr
    (tier,) = ran.json()["tiers"]
    assert tier["free_bytes"] is None  # statfs of 0 blocks (no ceph-mgr here): unknown, not full
    areas = {a["area"]: a for a in tier["areas"]}
    ds = areas["datasets"]
    assert (ds["bytes"], ds["files"], ds["dirs"], ds["usage_source"]) == (total, 30, 6, "cephfs")
    assert (ds["fs_quota_bytes"], ds["fs_quota_files"]) == (8 << 20, 1000)
    assert ds["free_bytes"] == (8 << 20) - total  # what the quota leaves
    assert areas["scratch"]["fs_quota_bytes"] is None and areas["scratch"]["free_bytes"] is None
    prom = (laid_out.two / "sk.prom").read_text()
    promtool(prom)
    values = {ln.split("{")[0]: ln.rsplit(" ", 1)[1] for ln in prom.splitlines() if 'area="datasets"' in ln}
    assert values["storekit_area_bytes"] == str(total)
    assert values["storekit_area_fs_quota_bytes"] == "8388608"
    assert values["storekit_area_fs_quota_files"] == "1000"
    human = sk(laid_out.two, "status", "--layout", "shared.toml")
    assert "8.0 MiB (fs)" in human.stdout and "unknown" in human.stdout


PREPARE = ["prepare", "dataset", "--tokenizer", TOKENIZER, "--name", "q", "-i", "corpus.jsonl"]
PREPARE += ["--json", "--quiet", "--workers", "1", "--shard-size", "8KiB"]


def shards(root: Path) -> dict[str, bytes]:
    v1 = root / "storage/datasets/text/q/v1"
    return {p.name: p.read_bytes() for p in sorted(v1.iterdir()) if p.suffix in (".bin", ".idx")}


@pytest.mark.slow  # ~15 s: three prepares, and the rstats of the filler to propagate
def test_a_full_quota_is_exit_6_naming_the_area_and_a_rerun_completes(
    cephfs: TwoMounts, sk: Any, tmp_path: Path
) -> None:
    records = sample_records(limit_bytes=60_000, max_doc=4_000)
    for where in (cephfs.one, tmp_path):
        write_jsonl(where / "corpus.jsonl", records)
        assert sk(where, "init", "--json").code == 0
    assert sk(tmp_path, *PREPARE).code == 0  # the same run on local disk: the bytes to expect
    # node two fills the area to 60 of its 64 KiB; once node one's client knows that (CephFS
    # enforces quotas in the client, from the rstats the MDS propagates), any shard overflows it
    datasets = cephfs.two / "storage" / "datasets"
    with open(datasets / "filler.bin", "wb") as fh:
        fh.write(b"f" * 60 * 1024)
        os.fsync(fh.fileno())
    os.setxattr(datasets, "ceph.quota.max_bytes", b"65536")
    settled(cephfs.one / "storage" / "datasets", 60 * 1024, 1)

    full = sk(cephfs.one, *PREPARE)
    assert full.code == 6, full.stderr
    error = full.json()["error"]["message"]
    assert f"the quota of area datasets ({cephfs.one / 'storage' / 'datasets'}) is full: 64.0 KiB" in error
    assert full.stderr.startswith(f"error: {error}\n") and "Traceback" not in full.stderr
    assert not (datasets / "text" / "q" / "v1").exists()  # nothing committed, nothing half
    assert not list((datasets / "text" / "q").glob(".v1*"))

    os.setxattr(datasets, "ceph.quota.max_bytes", b"0")  # raised (0: no quota)
    again = sk(cephfs.one, *PREPARE)
    assert again.code == 0, again.stderr
    assert shards(cephfs.two) == shards(tmp_path) and shards(tmp_path)


@contextlib.contextmanager
def stalled_mds_of(cephfs: TwoMounts) -> Iterator[None]:
    """The MDS stopped (SIGSTOP: a metadata server that stalls) for the test's body, then resumed.
    Only the pid cephfs-up.sh recorded, and only while it still is a ceph-mds."""
    pid = int(cephfs.mds_pid_file.read_text())
    assert os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "ceph-mds"
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


STALL_CASES = {
    "status": ["status", "--json", "--prometheus", "LOCAL/up.prom"],
    "layout-check": ["layout", "check", "--json"],
    "prepare": [
        "prepare",
        "dataset",
        "--tokenizer",
        TOKENIZER,
        "--name",
        "s",
        "-i",
        "LOCAL/c.jsonl",
        "--json",
    ],
    # a node-local burst tier drained to the shared one (its plan reads only the burst tier)
    "tier-drain": ["tier", "--drain", "--json"],
}
BURST = '[tiers.nvme]\nurl = "./nvme"\nrole = "burst"\n'


def site(tier_url: str, command: str) -> str:
    shared = f'[tiers.shared]\nurl = "{tier_url}"\nrole = "parallel"\n'
    return f'default_tier = "shared"\n{shared}' + (BURST if command == "tier-drain" else "")


@pytest.mark.parametrize("command", list(STALL_CASES))
def test_a_stalled_mds_is_a_tier_down_not_a_hang(
    cephfs: TwoMounts, tmp_path: Path, sk: Any, command: str
) -> None:
    """Node one lays the tier out; node two, which never looked at it, runs a command while the MDS is
    stopped: its first metadata call blocks in the kernel (no signal ends it), the deadline ends
    the wait, the tier is down (exit 5) naming the mount, and the command exits."""
    write_jsonl(tmp_path / "c.jsonl", sample_records(limit_bytes=4_000))
    (tmp_path / "one.toml").write_text(site((cephfs.one / "storage").as_uri(), command))
    (tmp_path / "two.toml").write_text(site((cephfs.two / "storage").as_uri(), command))
    assert sk(tmp_path, "init", "--config", "one.toml", "--json").code == 0
    if command == "tier-drain":
        assert sk(tmp_path, "init", "--config", "one.toml", "--tier", "nvme", "--json").code == 0
        unit = tmp_path / "nvme/checkpoints/run_001/step_000100"
        unit.mkdir(parents=True)
        (unit / "__0_0.distcp").write_bytes(b"r" * 100)
        (unit / ".metadata").write_bytes(b"m")
    args = [a.replace("LOCAL", str(tmp_path)) for a in STALL_CASES[command]]
    env = {"STOREKIT_MOUNT_DEADLINE": "2", "STOREKIT_CONFIG": str(tmp_path / "two.toml")}
    with stalled_mds_of(cephfs):
        started = time.monotonic()
        proc = start_storekit(args, cwd=tmp_path, env=env)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # hung: the MDS is resumed first, or no kill could end it
            out = err = None
        took = time.monotonic() - started
    if out is None:
        proc.kill()
        proc.communicate()
        pytest.fail(f"storekit {command} hung on the stalled mount for {took:.0f} s")
    ran = Ran(proc.returncode, out, err)
    assert ran.code == 5, ran.stderr
    doc = ran.json()  # status and layout check report the tier as a row, then fail; the others fail
    error = doc["tiers"][0]["error"] if command in ("status", "layout-check") else doc["error"]["message"]
    mount = cephfs.two.parent
    assert (
        f"on the fuse.ceph-fuse mount {mount} (ceph-fuse) did not answer statfs/stat/listing within 2 s"
        in error
    )
    assert took < 60, took  # the deadline, not the outage, ended it (bounded: a loaded host starts slowly)
    if command == "status":
        assert ran.json()["tiers"][0]["reachable"] is False
        assert 'storekit_tier_up{tier="shared",role="parallel"} 0\n' in (tmp_path / "up.prom").read_text()
    # the MDS is back: the same command through the same mount answers, within the default deadline
    # (an MDS resumed on a loaded host may take longer than 2 s to serve its clients again)
    again = run_storekit(args, cwd=tmp_path, env={"STOREKIT_CONFIG": env["STOREKIT_CONFIG"]}, timeout=120)
    assert again.code in (0, 4), again.stderr  # layout check may find the test's own entries


def test_bench_io_runs_on_cephfs_with_o_direct_and_leaves_nothing(cephfs: TwoMounts) -> None:
    """O_DIRECT on a FUSE mount is accepted (unaligned too; see bench io --help): the run says so,
    moves the planned bytes, and leaves the mount as it found it, seen from the other node."""
    args = ["bench", "io", "--target", str(cephfs.one), "--pattern", "shards", "--workers", "1"]
    ran = run_storekit([*args, "--size", "4M", "--file-size", "2M", "--repeat", "1", "--json"], timeout=120)
    assert ran.code == 0, ran.stderr
    doc = ran.json()
    assert doc["environment"]["filesystem"]["fs_type"] == "fuse.ceph-fuse"
    reps = [rep for r in doc["results"] for ph in r["phases"] for rep in ph["repeats"]]
    assert reps and all(rep["direct"] is True and rep["bytes"] == 4 << 20 for rep in reps)
    assert sorted(p.name for p in cephfs.two.iterdir()) in ([], ["scratch"])
    assert not list(cephfs.two.glob("scratch/storekit-bench-*"))
