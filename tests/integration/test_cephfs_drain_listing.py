"""A drain on one node while another lists (real CephFS, two ceph-fuse mounts as two nodes): node one
drains its node-local burst tier onto the shared tier through mount 1 and is held at fault points (a
file copied into the unit's temp; the unit renamed into place); node two runs `ckpt list`, `ckpt
latest`, `layout check` and `status` through mount 2 at each. Node two never sees a half-moved unit as
complete: while copying it is an in-progress temp; once it has its name, every byte is there."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import TwoMounts, run_storekit, start_storekit, wait_reached

pytestmark = [pytest.mark.cephfs, pytest.mark.slow]  # ~10 s of CLI runs on the shared mounts

SITE = 'default_tier = "shared"\n[tiers.shared]\nurl = "{url}"\nrole = "parallel"\n'
BURST = '[tiers.nvme]\nurl = "./nvme"\nrole = "burst"\n'
RUN = "checkpoints/run_001"


def listing(tmp_path: Path, env: dict[str, str]) -> dict[str, object]:
    ran = run_storekit(["ckpt", "list", RUN, "--json"], cwd=tmp_path, env=env)
    assert ran.code == 0, ran.stderr
    doc: dict[str, object] = ran.json()
    return doc


def layout_and_status_are_clean(tmp_path: Path, env: dict[str, str]) -> None:
    check = run_storekit(["layout", "check", "--json"], cwd=tmp_path, env=env)
    assert check.code == 0, check.stdout + check.stderr  # a young temp is a write in progress
    (tier,) = check.json()["tiers"]
    assert tier["findings"] == []
    status = run_storekit(["status", "--json"], cwd=tmp_path, env=env)
    assert status.code == 0, status.stderr
    (row,) = status.json()["tiers"]
    assert row["reachable"] is True and row["error"] is None


def test_a_drain_on_node_one_while_node_two_lists(cephfs: TwoMounts, tmp_path: Path) -> None:
    (tmp_path / "one.toml").write_text(SITE.format(url=(cephfs.one / "storage").as_uri()) + BURST)
    (tmp_path / "two.toml").write_text(SITE.format(url=(cephfs.two / "storage").as_uri()))
    one = {"STOREKIT_CONFIG": str(tmp_path / "one.toml")}
    two = {"STOREKIT_CONFIG": str(tmp_path / "two.toml")}
    assert run_storekit(["init", "--json"], cwd=tmp_path, env=one).code == 0
    assert run_storekit(["init", "--tier", "nvme", "--json"], cwd=tmp_path, env=one).code == 0
    unit = tmp_path / "nvme" / RUN / "step_000100"
    unit.mkdir(parents=True)
    files = {f"__{r}_0.distcp": os.urandom(100_000 + r) for r in range(3)} | {".metadata": b"meta"}
    for name, data in files.items():
        (unit / name).write_bytes(data)

    faults = tmp_path / "faults"
    faults.mkdir()
    env = one | {
        "STOREKIT_FAULTS": "tier.file-copied=pause,tier.renamed=pause",
        "STOREKIT_FAULT_DIR": str(faults),
    }
    drain = start_storekit(["tier", "--drain", "--json"], cwd=tmp_path, env=env)
    try:
        # held with a file copied into the unit's temp on the shared tier
        wait_reached(faults, drain, "tier.file-copied")
        run_two = cephfs.two / "storage" / RUN
        (temp,) = [p.name for p in run_two.iterdir()]
        assert temp.startswith(".step_000100.storekit-tmp-drain-")
        doc = listing(tmp_path, two)
        assert [(u["name"], u["state"], u["is_temp"]) for u in doc["units"]] == [(temp, "in-progress", True)]  # type: ignore[index]
        assert doc["latest"] is None
        latest = run_storekit(["ckpt", "latest", RUN, "--json"], cwd=tmp_path, env=two)
        assert latest.code == 3, latest.stdout  # no complete checkpoint to resume from yet
        layout_and_status_are_clean(tmp_path, two)

        # held with the unit renamed into place (the archive record not written yet): complete,
        # and every byte of it readable through node two
        (faults / "tier.file-copied.go").touch()
        wait_reached(faults, drain, "tier.renamed")
        doc = listing(tmp_path, two)
        units = [(u["name"], u["state"], u["bytes"], u["files"]) for u in doc["units"]]  # type: ignore[index]
        assert units == [("step_000100", "complete", sum(map(len, files.values())), 4)]
        assert {p.name: p.read_bytes() for p in (run_two / "step_000100").iterdir()} == files
        layout_and_status_are_clean(tmp_path, two)
    finally:
        for name in ("tier.file-copied", "tier.renamed"):
            (faults / f"{name}.go").touch()
        out, err = drain.communicate(timeout=120)
    assert drain.returncode == 0, err
    assert [r["status"] for r in json.loads(out)["results"]] == ["done"]
    final = listing(tmp_path, two)
    assert [(u["name"], u["state"]) for u in final["units"]] == [("step_000100", "complete")]  # type: ignore[index]
    assert sorted(p.name for p in run_two.iterdir()) == ["step_000100", "step_000100.storekit-archive.json"]
