"""A full CephFS quota is a clean stop for every writer beside prepare (tests/integration/test_cephfs.py):
the commit API, tier --drain onto the shared tier, and bench io. Each is exit 6 (NoSpaceError) naming
the area and its quota, leaves nothing committed or half-written, and completes once the quota is raised.

CephFS enforces quotas in the client from the recursive statistics the MDS propagates seconds after the
writes: node two fills the area, and node one writes only once its view of the area's rbytes has caught
up (`settled`, a bounded wait on a condition)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import xxhash

from storekit.checkpoint import commit
from storekit.errors import NoSpaceError
from tests.conftest import TwoMounts, run_storekit
from tests.integration.test_cephfs import settled

pytestmark = [pytest.mark.cephfs, pytest.mark.slow]  # each waits ~5-7 s for the MDS's rstats

QUOTA = 64 * 1024


def tree_size(root: Path) -> tuple[int, int]:
    sizes = [(Path(d) / f).stat().st_size for d, _, files in os.walk(root) for f in files]
    return sum(sizes), len(sizes)


def fill(one: Path, two: Path, free: int = 4 * 1024) -> None:
    """Node two fills area `two` up to `free` bytes below a 64 KiB quota; returns once node one's
    client (mount `one`, the same directory) sees the area's usage, so its next big write fails."""
    used, _ = tree_size(two)
    with open(two / "filler.bin", "wb") as fh:
        fh.write(b"f" * (QUOTA - free - used))
        os.fsync(fh.fileno())
    os.setxattr(two, "ceph.quota.max_bytes", str(QUOTA).encode())
    settled(one, *tree_size(two))


def raise_quota(area: Path) -> None:
    os.setxattr(area, "ceph.quota.max_bytes", b"0")  # 0: no quota


def full_message(area: Path) -> str:
    return f"the quota of area {area.name} ({area}) is full: 64.0 KiB"


def test_ckpt_commit_into_a_full_quota_raises_no_space_and_commits_nothing(
    cephfs: TwoMounts, sk: Any
) -> None:
    assert sk(cephfs.one, "init", "--json").code == 0
    run = cephfs.one / "storage" / "checkpoints" / "run_001"
    with commit(run, step=1) as stage, stage.open("model.pt") as fh:
        fh.write(b"one" * 100)
    fill(cephfs.one / "storage" / "checkpoints", cephfs.two / "storage" / "checkpoints")
    state = os.urandom(100_000)  # 25 times what the quota leaves

    def step_2() -> None:
        with commit(run, step=2) as stage:
            with stage.open("model.pt") as fh:
                fh.write(state)
            (stage.path / "optim").mkdir()
            (stage.path / "optim" / "shard0.bin").write_bytes(state[:1000])  # as a library writes

    with pytest.raises(NoSpaceError) as failed:
        step_2()
    err = failed.value
    assert err.exit_code == 6
    area = cephfs.one / "storage" / "checkpoints"
    assert str(err) == f"checkpoint {run / 'step_000002'}: {full_message(area)}"
    assert "nothing was committed" in (err.hint or "")
    seen = cephfs.two / "storage" / "checkpoints" / "run_001"  # from the other node
    assert sorted(p.name for p in seen.iterdir()) == ["latest", "step_000001"]  # no step 2, no stage
    assert (seen / "latest").read_text() == "step_000001\n"

    raise_quota(area)
    step_2()  # the rerun completes
    assert (seen / "latest").read_text() == "step_000002\n"
    manifest = json.loads((seen / "step_000002" / "manifest.json").read_bytes())
    assert {f["path"]: f["xxh3_128"] for f in manifest["files"]} == {
        "model.pt": xxhash.xxh3_128_hexdigest(state),
        "optim/shard0.bin": xxhash.xxh3_128_hexdigest(state[:1000]),
    }
    assert (seen / "step_000002" / "model.pt").read_bytes() == state


BURST_SITE = """default_tier = "shared"
[tiers.shared]
url = "{url}"
role = "parallel"
[tiers.nvme]
url = "./nvme"
role = "burst"
"""


def test_tier_drain_onto_a_full_quota_is_exit_6_and_moves_nothing(
    cephfs: TwoMounts, sk: Any, tmp_path: Path
) -> None:
    (tmp_path / "site.toml").write_text(BURST_SITE.format(url=(cephfs.one / "storage").as_uri()))
    env = {"STOREKIT_CONFIG": str(tmp_path / "site.toml")}
    assert run_storekit(["init", "--json"], cwd=tmp_path, env=env).code == 0
    assert run_storekit(["init", "--tier", "nvme", "--json"], cwd=tmp_path, env=env).code == 0
    unit = tmp_path / "nvme/checkpoints/run_001/step_000100"
    unit.mkdir(parents=True)
    payload = os.urandom(200_000)
    (unit / "__0_0.distcp").write_bytes(payload)
    (unit / ".metadata").write_bytes(b"m")
    fill(cephfs.one / "storage" / "checkpoints", cephfs.two / "storage" / "checkpoints")

    full = run_storekit(["tier", "--drain", "--json"], cwd=tmp_path, env=env)
    assert full.code == 6, full.stderr
    (result,) = full.json()["results"]
    assert result["status"] == "failed" and result["exit_code"] == 6
    assert full_message(cephfs.one / "storage" / "checkpoints") in result["reason"]
    assert "Traceback" not in full.stderr
    run_two = cephfs.two / "storage" / "checkpoints" / "run_001"
    assert not run_two.exists() or list(run_two.iterdir()) == []  # no unit, no partial copy
    assert (unit / "__0_0.distcp").read_bytes() == payload  # the source untouched

    raise_quota(cephfs.two / "storage" / "checkpoints")
    again = run_storekit(["tier", "--drain", "--json"], cwd=tmp_path, env=env)
    assert again.code == 0, again.stderr
    assert [r["status"] for r in again.json()["results"]] == ["done"]
    assert (run_two / "step_000100" / "__0_0.distcp").read_bytes() == payload
    assert (run_two / "step_000100" / ".metadata").read_bytes() == b"m"


def test_bench_io_into_a_full_quota_is_exit_6_and_leaves_nothing(cephfs: TwoMounts, sk: Any) -> None:
    assert sk(cephfs.one, "init", "--json").code == 0
    scratch_one, scratch_two = (m / "storage" / "scratch" for m in (cephfs.one, cephfs.two))
    fill(scratch_one, scratch_two)
    args = ["bench", "io", "--target", str(cephfs.one / "storage"), "--pattern", "shards"]
    args += ["--workers", "1", "--size", "4M", "--file-size", "2M", "--repeat", "1", "--json"]

    full = run_storekit(args, timeout=120)
    assert full.code == 6, full.stderr
    error = full.json()["error"]["message"]
    assert error.startswith(f"write phase ran out of space: {scratch_one}/storekit-bench-")
    assert error.endswith(full_message(scratch_one))
    assert full.stderr.count("error: ") == 1 and "Traceback" not in full.stderr
    assert [p.name for p in scratch_two.iterdir()] == ["filler.bin"]  # nothing left behind

    raise_quota(scratch_two)
    again = run_storekit(args, timeout=120)
    assert again.code == 0, again.stderr
    reps = [rep for r in again.json()["results"] for ph in r["phases"] for rep in ph["repeats"]]
    assert reps and all(rep["bytes"] == 4 << 20 for rep in reps)
    assert [p.name for p in scratch_two.iterdir()] == ["filler.bin"]
