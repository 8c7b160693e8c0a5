"""`storekit tier --drain --executor slurm --nodes N` on the real Slurm: one drain per node as one job
step (storekit/tier/drainjob.py), each node draining its own burst tier, every node's outcome in the
job record `jobs status` shows.

The test cluster's nodes are slurmd processes on this host, sharing its file system: each node's
burst tier is its own directory, `burst/${SLURMD_NODENAME}` in the site config (slurmstepd sets
SLURMD_NODENAME in every task; the launching command, on no node, reads `burst/login`). The step
runs in partition `cpu` (slurm-up.sh: the second half of the nodes), so which nodes drain is known;
a node of the other partition keeps its units, untouched.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from storekit.config import TierConfig
from storekit.layout.init import apply_init, plan_init
from storekit.layout.spec import load_layout
from storekit.store import open_store
from storekit.tier.stubfile import read_stub, stub_path
from tests.conftest import run_storekit, start_storekit, wait_reached
from tests.unit.tier.conftest import dcp_unit, tree_state
from tests.unit.tier.helpers import snapshot, unfinished

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
PARTITION = "cpu"
STEPS = ("step_000100", "step_000200")  # the older is drained and freed, the newest copied and kept


def run_of(node: str) -> str:
    """Each node's own run, `run_NNN` as the layout names runs: sk-node3 -> run_003."""
    return f"checkpoints/run_{int(''.join(c for c in node if c.isdigit())):03d}"


@pytest.fixture
def nodes(slurm_cluster: None) -> dict[str, list[str]]:
    """Partition -> its nodes, as sinfo lists them."""
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%P"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    parts: dict[str, list[str]] = {}
    for line in proc.stdout.split():
        name, part = line.split("|")
        parts.setdefault(part.rstrip("*"), []).append(name)
    if len(parts.get(PARTITION, [])) < 2:
        pytest.skip(f"partition {PARTITION} with two nodes needed (slurm-up.sh); sinfo: {parts}")
    return {p: sorted(set(n)) for p, n in parts.items()}


@pytest.fixture
def site_dir(tmp_path: Path, nodes: dict[str, list[str]]) -> Path:
    """lustre (parallel, shared) and a burst tier per node, each holding two checkpoints of its own run."""
    (tmp_path / "storekit.toml").write_text(
        'default_tier = "lustre"\n'
        '[tiers.lustre]\nurl = "./lustre"\nrole = "parallel"\n'
        '[tiers.nvme]\nurl = "./burst/${SLURMD_NODENAME:-login}"\nrole = "burst"\n'
    )
    spec = load_layout("llm-cluster")
    every = sorted({n for names in nodes.values() for n in names})
    for name, url in [("lustre", tmp_path / "lustre"), *((n, tmp_path / "burst" / n) for n in every)]:
        store = open_store(TierConfig(name="t", url=url.as_uri(), role="parallel"))
        apply_init(plan_init(spec, store), store)
        if name != "lustre":
            for n, step in enumerate(STEPS):
                dcp_unit(url / run_of(name), step, size=50_000 * (n + 1))
    return tmp_path


def tier(site: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    ran = run_storekit(
        ["tier", "--drain", "--executor", "slurm", "--nodes", "2", "--slurm-partition", PARTITION, *args,
         "--config", str(site / "storekit.toml"), "--json"],
        cwd=site, env={"STOREKIT_FAULTS": "", **(env or {})}, timeout=300,
    )  # fmt: skip
    return ran.returncode, json.loads(ran.stdout), ran.stderr


def jobs_status(site: Path, work: str) -> dict[str, Any]:
    ran = run_storekit(["jobs", "status", work, "--config", str(site / "storekit.toml"), "--json"], cwd=site)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (job,) = json.loads(ran.stdout)["jobs"]
    assert isinstance(job, dict)
    return job


def drained(site: Path, node: str, before: dict[str, Any]) -> None:
    """Both checkpoints of `node` on lustre byte for byte; the older freed (its stub left), the
    newest still on the node's burst tier."""
    burst = site / "burst" / node / run_of(node)
    for step in STEPS:
        assert snapshot(site / "lustre" / run_of(node) / step) == before[node][step]
    stub = read_stub(stub_path(burst / STEPS[0]))
    assert stub is not None and (stub.to_tier, stub.to_path) == ("lustre", f"{run_of(node)}/{STEPS[0]}")
    assert not os.path.lexists(burst / STEPS[0])
    assert snapshot(burst / STEPS[1]) == before[node][STEPS[1]]


def snapshots(site: Path, names: list[str]) -> dict[str, Any]:
    return {n: {s: snapshot(site / "burst" / n / run_of(n) / s) for s in STEPS} for n in names}


def test_every_node_drains_its_own_burst_tier_and_the_record_shows_each(
    site_dir: Path, nodes: dict[str, list[str]]
) -> None:
    ours = nodes[PARTITION][:2]
    others = sorted(set(nodes["debug"]) - set(ours))
    before = snapshots(site_dir, ours)
    untouched = {n: tree_state(site_dir / "burst" / n) for n in others}
    code, doc, err = tier(site_dir)
    assert code == doc["exit_code"] == 0, err
    assert [n["node"] for n in doc["nodes"]] == ours and doc["executor"] == "slurm"
    for node in doc["nodes"]:
        assert (node["state"], node["exit_code"], node["units_moved"], node["units_failed"]) == (
            "done",
            0,
            2,
            0,
        )
        size = sum(len(v[3]) for s in STEPS for v in before[node["node"]][s].values() if v[0] == "file")
        assert node["bytes_moved"] == size
        assert [r["path"] for r in node["report"]["results"]] == [
            f"{run_of(node['node'])}/{s}" for s in STEPS
        ]
    assert sorted((r["node"], r["status"]) for r in doc["results"]) == sorted(
        (n, "done") for n in ours for _ in STEPS
    )
    for node in ours:
        drained(site_dir, node, before)
    for node in others:  # no drain ran there
        assert tree_state(site_dir / "burst" / node) == untouched[node]
    assert unfinished(site_dir / "lustre/.storekit-tier-journal") == []

    work = Path(doc["work_dir"])
    assert work.parent == site_dir / "lustre/scratch" and work.name.startswith("storekit-tier-drain-nodes-")
    job = jobs_status(site_dir, str(work))
    assert (job["kind"], job["tasks"], job["complete"], job["states"]["done"]) == (
        "tier-drain",
        2,
        True,
        "0-1",
    )
    (step,) = job["submissions"]
    assert step["executor"] == "slurm" and step["extra"]["role"] == "step"
    assert step["job_id"] == doc["slurm_job_id"] and step["extra"]["step_id"] == doc["step_id"]
    assert step["extra"]["step_id"].startswith(f"{step['job_id']}.")
    result = job["result"]
    assert result["exit_code"] == 0
    assert [(n["node"], n["state"], n["units_moved"]) for n in result["nodes"]] == [
        (n, "done", 2) for n in ours
    ]

    again, doc, err = tier(site_dir)  # the same command again: nothing left but the newest, kept
    assert again == 0, err
    assert [n["units_failed"] for n in doc["nodes"]] == [0, 0]


def test_a_node_whose_drain_fails_fails_the_job_naming_it_and_the_other_drains(
    site_dir: Path, nodes: dict[str, list[str]]
) -> None:
    good, bad = nodes[PARTITION][:2]
    before = snapshots(site_dir, [good, bad])
    (site_dir / "lustre" / run_of(bad) / STEPS[0]).mkdir(parents=True)  # not its copy: refused
    code, doc, err = tier(site_dir)
    assert code == doc["exit_code"] == 1, err
    outcome = {n["node"]: n for n in doc["nodes"]}
    assert (outcome[good]["state"], outcome[good]["units_moved"]) == ("done", 2)
    assert (outcome[bad]["state"], outcome[bad]["exit_code"], outcome[bad]["units_failed"]) == (
        "failed",
        1,
        1,
    )
    assert outcome[bad]["error"].startswith(f"node {bad}: 1 of 2 move(s) failed")
    assert "already exists on the destination" in outcome[bad]["error"]
    drained(site_dir, good, before)
    assert snapshot(site_dir / "burst" / bad / run_of(bad) / STEPS[0]) == before[bad][STEPS[0]]  # kept
    job = jobs_status(site_dir, doc["work_dir"])
    (failure,) = job["failed"]
    assert failure["error"] == outcome[bad]["error"] and failure["exit_code"] == 1
    assert job["result"]["exit_code"] == 1
    assert {n["node"]: n["state"] for n in job["result"]["nodes"]} == {good: "done", bad: "failed"}


def test_a_node_killed_before_it_records_is_failed_by_the_launcher(
    site_dir: Path, nodes: dict[str, list[str]]
) -> None:
    """SIGKILL at `tier.drain-node` on every node: no node leaves a record; the launcher records
    each failed with why (srun's exit and last line), and nothing moved."""
    ours = nodes[PARTITION][:2]
    before = snapshots(site_dir, ours)
    code, doc, err = tier(site_dir, env={"STOREKIT_FAULTS": "tier.drain-node=kill"})
    assert code == doc["exit_code"] == 1, err
    for node in doc["nodes"]:
        assert (node["state"], node["exit_code"], node["report"]) == ("failed", 1, None)
        # named from squeue when it showed the step while it ran, else "?"
        assert re.fullmatch(r"node (sk-node\d+|\?): no record from its drain \(srun failed .*", node["error"])
    assert snapshots(site_dir, ours) == before
    job = jobs_status(site_dir, doc["work_dir"])
    assert (job["states"]["failed"], job["result"]["exit_code"]) == ("0-1", 1)


def test_dry_run_writes_nothing_and_starts_nothing(site_dir: Path) -> None:
    before = tree_state(site_dir)
    code, doc, err = tier(site_dir, "--dry-run")
    assert code == 0, err
    assert (doc["dry_run"], doc["nodes"], doc["executor"]) == (True, 2, "slurm")
    srun = doc["srun"]
    assert srun[:5] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=0"]
    assert f"--partition={PARTITION}" in srun and srun[-2:] == ["--node-record", "WORK_DIR"]
    assert "--drain=@roles" in srun
    assert tree_state(site_dir) == before  # no record, no scratch/, no journal, nothing drained


def test_ctrl_c_cancels_the_step_and_the_record_says_cancelled(
    site_dir: Path, nodes: dict[str, list[str]], tmp_path: Path
) -> None:
    """Each node's drain is held at `tier.drain-node` (before it plans); once one is there, the
    command gets SIGINT: the step is cancelled, every node recorded cancelled, nothing moved."""
    ours = nodes[PARTITION][:2]
    before = snapshots(site_dir, ours)
    faults = tmp_path / "faults"
    faults.mkdir()
    env = {"STOREKIT_FAULTS": "tier.drain-node=pause", "STOREKIT_FAULT_DIR": str(faults)}
    proc = start_storekit(
        ["tier", "--drain", "--executor", "slurm", "--nodes", "2", "--slurm-partition", PARTITION,
         "--config", str(site_dir / "storekit.toml"), "--json"],
        cwd=site_dir, env=env,
    )  # fmt: skip
    try:
        wait_reached(faults, proc, "tier.drain-node")  # a node's drain is held there
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "the drain step" in json.loads(out)["error"]["message"]
    (work,) = (site_dir / "lustre/scratch").glob("storekit-tier-drain-nodes-*")
    job = jobs_status(site_dir, str(work))
    assert job["states"]["failed"] == "0-1" and job["result"]["exit_code"] == 130
    assert [n["state"] for n in job["result"]["nodes"]] == ["cancelled", "cancelled"]
    assert snapshots(site_dir, ours) == before  # held before planning: nothing moved
