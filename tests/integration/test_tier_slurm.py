"""`storekit tier --archive ... --executor slurm` on the real Slurm (4 emulated nodes): the plan's
units are the tasks of a "tier" job (storekit/tier/job.py), each moved by an array element with the
same mover and journals; `jobs status` shows the job; an element killed at a fault point leaves its
unit resumable and `storekit jobs rerun` completes it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from storekit.config import TierConfig
from storekit.layout.init import apply_init, plan_init
from storekit.layout.spec import load_layout
from storekit.store import open_store
from storekit.tier.stubfile import read_stub, stub_path
from tests.conftest import run_storekit
from tests.integration.test_prepare_slurm import wait_gone
from tests.unit.tier.helpers import leftovers, make_unit, snapshot, unfinished

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
RUN = "checkpoints/run_001"
STEPS = ("step_000100", "step_000200", "step_000300")


@pytest.fixture
def site_dir(tmp_path: Path, slurm_cluster: None) -> Path:
    """lustre (parallel) and vault (an archive directory), three checkpoints, two of them old."""
    (tmp_path / "storekit.toml").write_text(
        'default_tier = "lustre"\n'
        '[tiers.lustre]\nurl = "./lustre"\nrole = "parallel"\n'
        '[tiers.vault]\nurl = "./vault"\nrole = "archive"\n'
        '[policies.old-runs]\naction = "archive"\nolder_than = "1d"\nkeep_last = 1\n'
    )
    lustre = open_store(TierConfig(name="lustre", url=(tmp_path / "lustre").as_uri(), role="parallel"))
    apply_init(plan_init(load_layout("llm-cluster"), lustre), lustre)
    for n, step in enumerate(STEPS):
        make_unit(tmp_path / "lustre" / RUN / step, seed=n, big=300_000 * (n + 1))
    return tmp_path


def tier(site: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    ran = run_storekit(
        ["tier", *args, "--config", str(site / "storekit.toml"), "--json"],
        cwd=site,
        env={"STOREKIT_FAULTS": "", **(env or {})},
        timeout=300,
    )
    return ran.returncode, json.loads(ran.stdout), ran.stderr


def jobs(site: Path, *args: str) -> dict[str, Any]:
    ran = run_storekit(["jobs", *args, "--config", str(site / "storekit.toml"), "--json"], cwd=site)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    doc: dict[str, Any] = json.loads(ran.stdout)
    return doc


def archived(site: Path, before: dict[str, Any]) -> None:
    """The two old steps are in the vault byte for byte, stubs beside their sources, sources gone."""
    for step in STEPS[:2]:
        src = site / "lustre" / RUN / step
        assert snapshot(site / "vault" / RUN / step) == before[step]
        stub = read_stub(stub_path(src))
        assert stub is not None and (stub.to_tier, stub.to_path) == ("vault", f"{RUN}/{step}")
        assert not os.path.lexists(src)
    assert snapshot(site / "lustre" / RUN / STEPS[2]) == before[STEPS[2]]  # the newest stays
    assert unfinished(site / "lustre/.storekit-tier-journal") == [] and leftovers(site / "vault") == []


def test_an_archive_as_a_slurm_job_moves_every_unit_and_its_record_shows_success(site_dir: Path) -> None:
    before = {step: snapshot(site_dir / "lustre" / RUN / step) for step in STEPS}
    code, doc, err = tier(site_dir, "--archive", "old-runs", "--dry-run", "--executor", "slurm")
    assert code == 0, err
    assert not (site_dir / "lustre/scratch").exists() or not os.listdir(site_dir / "lustre/scratch")

    code, doc, err = tier(site_dir, "--archive", "old-runs", "--executor", "slurm")
    assert code == 0, err
    assert [r["status"] for r in doc["results"]] == ["done", "done"] and doc["executor"] == "slurm"
    assert [r["path"] for r in doc["results"]] == [f"{RUN}/{s}" for s in STEPS[:2]]
    archived(site_dir, before)
    work = Path(doc["work_dir"])
    assert work.parent == site_dir / "lustre/scratch" and work.name.startswith("storekit-tier-archive-")
    (job,) = jobs(site_dir, "status", str(work))["jobs"]
    assert (job["kind"], job["tasks"], job["complete"], job["states"]["done"]) == ("tier", 2, True, "0-1")
    assert job["counts"] == {**{state: 0 for state in job["counts"]}, "done": 2}
    listed = jobs(site_dir, "status")  # every job in the tiers' scratch/: this one is there
    assert str(work) in json.dumps(listed)

    code, doc, err = tier(site_dir, "--recall", RUN, "--executor", "slurm")  # and back, as a job too
    assert code == 0, err
    assert [(r["action"], r["status"]) for r in doc["results"]] == [("recall", "done")] * 2
    for step in STEPS:
        assert snapshot(site_dir / "lustre" / RUN / step) == before[step]
        assert not stub_path(site_dir / "lustre" / RUN / step).exists()


def test_an_element_killed_after_freeing_the_source_is_completed_by_jobs_rerun(site_dir: Path) -> None:
    """SIGKILL at `tier.source-removed` (the unit's source gone, its journal at `stubbed`): the plan's
    own check would find the unit gone; the rerun resumes the journal instead and finishes it."""
    before = {step: snapshot(site_dir / "lustre" / RUN / step) for step in STEPS}
    code, doc, err = tier(
        site_dir,
        "--archive",
        "old-runs",
        "--executor",
        "slurm",
        env={"STOREKIT_FAULTS": "tier.source-removed"},
    )
    assert code == 1, err
    assert [r["status"] for r in doc["results"]] == ["failed", "failed"], doc["results"]
    work = Path(doc["work_dir"])
    journal = site_dir / "lustre/.storekit-tier-journal"
    states = [
        json.loads((journal / n).read_text())["state"] for n in unfinished(journal) if n.count(".") == 1
    ]
    assert states == ["stubbed", "stubbed"]  # both moves wait, their sources already freed
    assert not any(os.path.lexists(site_dir / "lustre" / RUN / step) for step in STEPS[:2])
    (job,) = jobs(site_dir, "status", str(work))["jobs"]
    assert (job["states"]["done"], job["complete"]) == ("", False), job

    rerun = jobs(site_dir, "rerun", str(work))
    ids = [i for i in (rerun.get("array_job_id"), rerun.get("finalize_job_id")) if i]
    assert ids, rerun
    wait_gone([str(i) for i in ids])
    (job,) = jobs(site_dir, "status", str(work))["jobs"]
    assert (job["states"]["done"], job["complete"], job["failed"]) == ("0-1", True, []), job
    archived(site_dir, before)
    for index in (0, 1):
        result = json.loads((work / f"tasks/{index:06d}/done.json").read_text())["result"]
        assert (result["status"], result["resumed"], result["freed"]) == ("done", True, True)


@pytest.mark.ceph
def test_an_archive_to_the_gateway_as_a_slurm_job_puts_every_byte_there(
    site_dir: Path, s3_tier: TierConfig
) -> None:
    """A bucket of the real Ceph RGW as the archive tier. The elements read its credentials from the
    site config (sbatch gets no credential from the environment: storekit/slurm/submit.py)."""
    opts = s3_tier.options
    with open(site_dir / "storekit.toml", "a") as fh:
        fh.write(f'[tiers.gw]\nurl = "{s3_tier.url}"\nrole = "archive"\n[tiers.gw.options]\n')
        fh.write(
            f'endpoint_url = "{opts["endpoint_url"]}"\nkey = "{opts["key"]}"\nsecret = "{opts["secret"]}"\n'
        )
        fh.write('[policies.to-gw]\naction = "archive"\nolder_than = "1d"\nkeep_last = 1\nto = "gw"\n')
    before = {step: snapshot(site_dir / "lustre" / RUN / step) for step in STEPS}
    code, doc, err = tier(site_dir, "--archive", "to-gw", "--executor", "slurm")
    assert code == 0, err
    assert [(r["status"], r["dest_url"].startswith("s3://")) for r in doc["results"]] == [("done", True)] * 2
    store = open_store(s3_tier)
    for step in STEPS[:2]:
        files = {rel: v[3] for rel, v in before[step].items() if v[0] == "file"}
        assert files and all(store.read_bytes(f"{RUN}/{step}/{rel}") == data for rel, data in files.items())
        stub = read_stub(stub_path(site_dir / "lustre" / RUN / step))
        assert stub is not None and (stub.to_tier, stub.to_path) == ("gw", f"{RUN}/{step}")
    assert unfinished(site_dir / "lustre/.storekit-tier-journal") == []
    (job,) = jobs(site_dir, "status", doc["work_dir"])["jobs"]
    assert (job["kind"], job["complete"]) == ("tier", True)
    assert opts["secret"] not in (Path(doc["work_dir"]) / "plan.json").read_text()


def test_a_unit_that_fails_in_its_element_is_reported_and_the_other_moves(site_dir: Path) -> None:
    """The failure record names the unit's reason, exit code and its element's Slurm log; the other
    unit moves; the command exits with the failure's code."""
    (site_dir / "vault" / RUN / STEPS[1]).mkdir(parents=True)  # not a copy of ours: refused
    code, doc, err = tier(site_dir, "--archive", "old-runs", "--executor", "slurm")
    assert code == doc["exit_code"] == 1, err
    done, failed = doc["results"]
    assert (done["status"], done["freed"], failed["status"]) == ("done", True, "failed")
    assert "already exists on the destination" in failed["reason"]
    (job,) = jobs(site_dir, "status", doc["work_dir"])["jobs"]
    assert (job["states"]["done"], job["states"]["failed"]) == ("0", "1")
    (record,) = job["failed"]
    assert "already exists on the destination" in record["error"] and record["exit_code"] == 1
    assert record["log"] and Path(record["log"]).is_file()  # the element's own Slurm log
    assert os.path.lexists(site_dir / "lustre" / RUN / STEPS[1])  # nothing of it was touched
