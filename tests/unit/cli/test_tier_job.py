"""Tier moves as a job (storekit/tier/job.py, cli/tier_job.py) without Slurm: the option checks,
--dry-run writes no job, and a plan's units as tasks of a "tier" job on the local executor (a failed
unit recorded while the others move; a unit whose move was killed after its source was freed is
resumed from its journal, not skipped as gone). On the real Slurm: tests/integration/test_tier_slurm.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from storekit import faults
from storekit.config import SiteConfig, load_config
from storekit.errors import Interrupted
from storekit.executors.base import get_executor
from storekit.jobs.find import find_job_dirs
from storekit.jobs.status import job_status
from storekit.tier.job import TierJob, create_job, job_results
from storekit.tier.moveunit import move_unit, unit_journal
from storekit.tier.plan import PlanRequest, build_plan
from storekit.tier.stubfile import read_stub, stub_path
from tests.conftest import Ran, run_storekit
from tests.unit.cli.test_tier import POLICIES, only_error_line
from tests.unit.tier.conftest import dcp_unit, make_site, tree_state

RUN = "checkpoints/run_001"


@pytest.fixture
def site_dir(tmp_path: Path) -> Path:
    make_site(tmp_path, POLICIES)
    for step in (100, 200, 300):
        dcp_unit(tmp_path / "lustre" / RUN, f"step_{step:06d}")
    dcp_unit(tmp_path / "nvme" / RUN, "step_000300")
    return tmp_path


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--drain", "--executor", "slurm"), "needs --nodes N outside an sbatch/salloc allocation"),
        (("--drain", "--nodes", "2"), "--nodes and --slurm-* need --executor slurm, not local"),
        (("--drain", "--executor", "slurm", "--nodes", "0"), "--nodes 0: expected a number of nodes above 0"),
        (("--archive", "old-runs", "--executor", "slurm", "--nodes", "2"), "for a drain on every node"),
        (("--drain", "--node-record", "x", "--executor", "slurm"), "--node-record is given by"),
        (("--archive", "old-runs", "--executor", "nope"), "--executor 'nope': expected local or slurm"),
        (
            ("--archive", "old-runs", "--executor", "slurm", "--plan-out", "p.json"),
            "--plan-out moves nothing",
        ),
        (("--archive", "old-runs", "--slurm-partition", "cpu"), "need --executor slurm, not local"),
        (("--archive", "old-runs", "--executor", "slurm", "--slurm-time", "soon"), "--slurm-time 'soon'"),
    ],
)
def test_a_wrong_executor_option_is_one_line_exit_2_and_moves_nothing(
    site_dir: Path, sk: Callable[..., Ran], args: tuple[str, ...], words: str
) -> None:
    before = tree_state(site_dir)
    ran = sk(site_dir, "tier", *args, "--json")
    assert ran.code == 2 and words in only_error_line(ran), ran.stderr
    assert tree_state(site_dir) == before


def test_dry_run_with_the_slurm_executor_writes_no_job(site_dir: Path, sk: Callable[..., Ran]) -> None:
    before = tree_state(site_dir)
    ran = sk(site_dir, "tier", "--archive", "old-runs", "--executor", "slurm", "--dry-run", "--json")
    assert ran.code == 0, ran.stderr
    assert ran.json()["totals"]["units"] == 2  # type: ignore[index]
    assert tree_state(site_dir) == before  # no work dir in scratch/, no journal, no lease


def _plan_job(site_dir: Path) -> tuple[SiteConfig, TierJob]:
    site = load_config(str(site_dir / "storekit.toml"))
    plan = build_plan(site, PlanRequest(site.policies["old-runs"]))
    return site, create_job(plan, site)


def test_a_tier_job_on_the_local_executor_moves_its_units_and_records_each(site_dir: Path) -> None:
    (site_dir / "vault" / RUN / "step_000200").mkdir(parents=True)  # not a copy of ours: refused
    site, job = _plan_job(site_dir)
    assert [u.src_path for u in job.plan.units] == [f"{RUN}/step_000100", f"{RUN}/step_000200"]
    report = get_executor("local").run(job, [0, 1], workers=2, progress=lambda *a: None)
    assert report.tasks_run == 1  # the failed unit did not stop the other one
    work = job.dir
    results = job_results(work, job.plan)
    assert [(r.path, r.status) for r in results] == [
        (f"{RUN}/step_000100", "done"),
        (f"{RUN}/step_000200", "failed"),
    ]
    assert "already exists on the destination" in results[1].reason and results[1].exit_code == 1
    assert list(results[0].phases) == ["plan", "copy", "read_back", "commit", "free"]  # as they ran
    assert read_stub(stub_path(site_dir / "lustre" / RUN / "step_000100")) is not None
    assert (site_dir / "vault" / RUN / "step_000100/__0_0.distcp").read_bytes() == bytes([0]) * 100
    st = job_status(work)
    assert (st.header.kind, st.states["done"], st.states["failed"]) == ("tier", [0], [1])
    assert find_job_dirs(None, site, None, None) == [work.path]  # `jobs status` finds it in scratch/
    assert json.loads((work.path / "tasks/000000/done.json").read_text())["result"]["freed"] is True


def test_a_unit_killed_after_its_source_was_freed_is_resumed_not_skipped(site_dir: Path) -> None:
    _site, job = _plan_job(site_dir)
    run = get_executor("local")

    def killed() -> None:
        raise KeyboardInterrupt  # what a stop leaves: the journal at `stubbed`, the source gone

    with faults.at("tier.source-removed", killed), pytest.raises(Interrupted):
        run.run(job, [0], workers=1, progress=lambda *a: None)
    assert not (site_dir / "lustre" / RUN / "step_000100").exists()
    assert job.dir.done_tasks() == set()
    report = run.run(job, [0], workers=1, progress=lambda *a: None)
    assert report.tasks_run == 1
    (result,) = job_results(job.dir, job.plan)[:1]
    assert (result.status, result.resumed, result.freed) == ("done", True, True)
    assert list((site_dir / "lustre/.storekit-tier-journal").glob("*.json")) == []


@pytest.mark.parametrize(
    ("action", "src", "dst"),
    [("archive", "lustre", "vault"), ("drain", "nvme", "lustre"), ("recall", "vault", "lustre")],
)
def test_unit_journal_names_the_journal_the_mover_keeps(
    site_dir: Path, action: str, src: str, dst: str
) -> None:
    """What a rerun task looks up (moveunit.unit_journal) is the file the mover wrote for that unit."""
    site = load_config(str(site_dir / "storekit.toml"))
    step = f"{RUN}/step_000300"
    if action == "recall":  # archived first (to the vault), then recalled to lustre
        move_unit(_unit("archive", "lustre", step, "vault"), site=site)
        unit = _unit("recall", src, step, dst)
    else:  # (lustre holds a step_000300 of its own: the drain's copy goes beside it)
        unit = _unit(action, src, step, dst, to="checkpoints/run_002/step_000300")
    journal = site_dir / "lustre/.storekit-tier-journal"

    def stop() -> None:
        raise KeyboardInterrupt

    with faults.at("tier.planned", stop), pytest.raises(KeyboardInterrupt):
        move_unit(unit, site=site)
    written = [p.name for p in journal.glob("*.json") if p.name.count(".") == 1]
    assert written == [f"{unit_journal(unit, site=site).id}.json"]


def _unit(action: str, src: str, path: str, dst: str, *, to: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        action=action, src_tier=src, src_path=path, dst_tier=dst, dst_path=to or path, free_source=True,
        unit_kind="checkpoint", writer=None, step=None,
    )  # fmt: skip


def test_a_local_run_imports_no_job_layer(site_dir: Path) -> None:
    """`tier --archive` without --executor (a Slurm epilog's drain, say) starts no faster than it
    did: the executors, the Slurm side and the job records stay unimported."""
    ran = run_storekit(
        ["tier", "--archive", "old-runs", "--config", str(site_dir / "storekit.toml"), "--json"],
        cwd=site_dir,
        env={"PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert ran.returncode == 0, ran.stderr
    assert [r["status"] for r in json.loads(ran.stdout)["results"]] == ["done", "done"]
    imported = [line.rsplit("|", 1)[-1].strip() for line in ran.stderr.splitlines() if "|" in line]
    assert "storekit.tier.apply" in imported
    assert not [
        m for m in imported if m.startswith(("storekit.executors", "storekit.slurm.", "storekit.jobdir"))
    ]
