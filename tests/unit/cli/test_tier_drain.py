"""A drain on every node (storekit/tier/drainjob.py) without Slurm: each node's side is `storekit tier
--drain --node-record WORK_DIR`, run as task $SLURM_PROCID of a "tier-drain" job, draining as the
plain command does and recording its report; what the launcher adds for a node that left no
record; what `jobs status` shows. The step on the real Slurm: tests/integration/test_tier_drain_slurm.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from storekit.config import load_config
from storekit.jobs.status import job_status
from storekit.slurm.step import StepInfo
from storekit.tier.drainjob import DrainRecord, node_outcomes
from storekit.tier.stubfile import read_stub, stub_path
from tests.conftest import Ran
from tests.unit.cli.test_tier import only_error_line
from tests.unit.tier.conftest import dcp_unit, make_site, tree_state
from tests.unit.tier.helpers import snapshot

RUN = "checkpoints/run_001"
STEPS = ("step_000100", "step_000200")


@pytest.fixture
def site_dir(tmp_path: Path) -> Path:
    make_site(tmp_path)
    for n, step in enumerate(STEPS):
        dcp_unit(tmp_path / "nvme" / RUN, step, size=1000 * (n + 1))
    return tmp_path


def new_record(site_dir: Path) -> DrainRecord:
    site = load_config(str(site_dir / "storekit.toml"))
    return DrainRecord.create(site, 2, {"drain": ["tier", "--drain=@roles"], "nodes": 2})


def as_task(monkeypatch: pytest.MonkeyPatch, task: int, node: str) -> None:
    for name, value in (("SLURM_PROCID", str(task)), ("SLURMD_NODENAME", node), ("SLURM_JOB_ID", "77"),
                        ("SLURM_STEP_ID", "0")):  # fmt: skip
        monkeypatch.setenv(name, value)


def test_a_nodes_drain_records_its_report_as_its_task(
    site_dir: Path, sk: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = {s: snapshot(site_dir / "nvme" / RUN / s) for s in STEPS}
    record = new_record(site_dir)
    assert record.path.parent == site_dir / "lustre/scratch"
    as_task(monkeypatch, 1, "sk-node4")
    ran = sk(site_dir, "tier", "--drain", "--node-record", str(record.path), "--quiet")
    assert (ran.code, ran.stdout) == (0, ""), ran.stderr
    for step in STEPS:  # drained as the plain command drains: both copied, the older freed
        assert snapshot(site_dir / "lustre" / RUN / step) == before[step]
    stub = read_stub(stub_path(site_dir / "nvme" / RUN / STEPS[0]))
    assert stub is not None and stub.to_tier == "lustre"
    assert snapshot(site_dir / "nvme" / RUN / STEPS[1]) == before[STEPS[1]]

    pending, done = node_outcomes(record.work, 2)
    assert (pending["state"], pending["exit_code"], pending["node"]) == ("pending", None, None)
    assert (done["node"], done["state"], done["exit_code"], done["units_moved"]) == ("sk-node4", "done", 0, 2)
    assert done["bytes_moved"] == sum(len(v[3]) for s in STEPS for v in before[s].values() if v[0] == "file")
    assert done["slurm"] == {"job_id": "77", "step_id": "77.0"}
    assert [r["path"] for r in done["report"]["results"]] == [f"{RUN}/{s}" for s in STEPS]
    status = job_status(record.work)
    assert (status.header.kind, status.states["done"], status.states["pending"]) == ("tier-drain", [1], [0])
    assert status.result is not None and status.result["exit_code"] is None  # node 0 has not said yet


def test_a_node_whose_drain_fails_records_the_failure_naming_itself(
    site_dir: Path, sk: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    (site_dir / "lustre" / RUN / STEPS[0]).mkdir(parents=True)  # not its copy: refused
    record = new_record(site_dir)
    as_task(monkeypatch, 0, "sk-node3")
    ran = sk(site_dir, "tier", "--drain", "--node-record", str(record.path), "--quiet")
    assert ran.code == 1
    assert "1 of 2 move(s) failed" in only_error_line(ran)  # in the node's log (the step's output)
    failed, _ = node_outcomes(record.work, 2)
    assert (failed["node"], failed["state"], failed["exit_code"]) == ("sk-node3", "failed", 1)
    assert failed["error"].startswith("node sk-node3: 1 of 2 move(s) failed, the first: drain ")
    assert (failed["units_moved"], failed["units_failed"]) == (1, 1)  # the other unit drained
    assert os.path.isdir(site_dir / "nvme" / RUN / STEPS[0])  # the refused one is kept


def test_the_launcher_records_a_node_that_left_no_record_and_the_step_from_the_nodes(
    site_dir: Path, sk: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    record = new_record(site_dir)
    as_task(monkeypatch, 1, "sk-node4")
    assert sk(site_dir, "tier", "--drain", "--node-record", str(record.path), "-q").code == 0
    step = SimpleNamespace(seen=None)  # squeue never showed it (a short drain)
    record._complete(step, "no record from its drain (srun failed (exit 9): gone)", 1)  # type: ignore[arg-type]
    lost, done = node_outcomes(record.work, 2)
    assert (lost["state"], lost["exit_code"], done["state"]) == ("failed", 1, "done")
    assert lost["error"] == "node ?: no record from its drain (srun failed (exit 9): gone)"
    (sub,) = record.work.submissions()
    assert (sub.job_id, sub.extra) == ("77", {"role": "step", "step_id": "77.0", "nodes": ["sk-node4"]})
    record.step_seen(StepInfo("77.0", ["sk-node3", "sk-node4"]))  # seen late: recorded once only
    assert len(record.work.submissions()) == 1
    status = job_status(record.work)
    assert status.result is not None and status.result["exit_code"] == 1
    assert [n["state"] for n in status.result["nodes"]] == ["failed", "done"]


@pytest.mark.parametrize(
    ("env", "words"),
    [({}, "$SLURM_PROCID unset"), ({"SLURM_PROCID": "2"}, "$SLURM_PROCID 2, 2 tasks")],
)
def test_a_node_record_outside_its_step_is_refused_and_drains_nothing(
    site_dir: Path, sk: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch, env: dict[str, str], words: str
) -> None:
    record = new_record(site_dir)
    monkeypatch.delenv("SLURM_PROCID", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    before = tree_state(site_dir)
    ran = sk(site_dir, "tier", "--drain", "--node-record", str(record.path))
    assert ran.code == 2 and words in only_error_line(ran)
    assert tree_state(site_dir) == before
