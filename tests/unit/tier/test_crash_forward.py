"""Every journal state has a forward path: a move killed after its stub or during its free ends,
after `tier gc`, a plain rerun of the same command, or a recall, with the unit in exactly one
committed state and no journal left; and a guard that the kill tests reach every journal state."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from storekit.tier.mover import drain_unit, recall_unit
from storekit.tier.purge import purge_unit
from storekit.tier.stubfile import read_stub, stub_path
from storekit.tier.unitjournal import STATES
from tests.conftest import Ran, run_in_process, run_storekit
from tests.unit.tier.conftest import make_site
from tests.unit.tier.helpers import (
    leftovers,
    make_unit,
    point_names,
    posix_site,
    run_killed,
    snapshot,
    unfinished,
)

POLICIES = '[policies.old-runs]\naction = "archive"\nolder_than = "1d"\nkeep_last = 1\n'
RUN = "checkpoints/run_001"
UNIT = f"{RUN}/step_000100"
# the steps around the stub and the free: after the stub is journaled, the tombstone rename (during
# the free), and the points between the stub's write and its journal entry, the free and its entry
AROUND_THE_FREE = ("tier.stub-written", "tier.stubbed", "durable.tombstoned", "tier.source-removed")


def test_the_kill_tests_reach_every_journal_state_and_every_step_around_the_free(tmp_path: Path) -> None:
    """A guard: a state added to the journal without a kill point in the kill tests fails here. The
    drain, recall and purge runs below are the ones test_crash_drain and test_purge kill at every
    point of (`*@N=kill` for each N)."""
    burst, parallel, journal = tmp_path / "b", tmp_path / "p", tmp_path / "j"
    make_unit(burst / UNIT, seed=3)
    parallel.mkdir()
    site = posix_site(burst, parallel)
    reached = set(point_names(lambda: drain_unit(burst, UNIT, site.tier("parallel"), journal_dir=journal)))
    drain_unit(burst, UNIT, site.tier("parallel"), journal_dir=journal)
    reached |= set(point_names(lambda: recall_unit(burst, UNIT, journal_dir=journal, site=site)))
    recall_unit(burst, UNIT, journal_dir=journal, site=site)
    drain_unit(burst, UNIT, site.tier("parallel"), journal_dir=journal, free_source=False)
    reached |= set(point_names(lambda: purge_unit(burst, UNIT, site.tier("parallel"), journal_dir=journal)))
    missing = sorted({f"tier.{s}" for s in STATES} - reached)
    assert missing == [], f"journal states no kill test reaches: {missing}"
    assert [p for p in AROUND_THE_FREE if p not in reached] == []


def test_a_stub_removed_by_hand_is_written_again_before_the_free(tmp_path: Path) -> None:
    burst, parallel, journal = tmp_path / "b", tmp_path / "p", tmp_path / "j"
    make_unit(burst / UNIT, seed=4)
    parallel.mkdir()
    site = posix_site(burst, parallel)
    before = snapshot(burst / UNIT)

    def op() -> object:
        return drain_unit(burst, UNIT, site.tier("parallel"), journal_dir=journal)

    assert run_killed(op, "tier.stubbed=kill")
    stub_path(burst / UNIT).unlink()  # the journal says "stubbed"; the stub is gone
    op()
    assert not os.path.lexists(burst / UNIT)
    stub = read_stub(stub_path(burst / UNIT))
    assert stub is not None and stub.to_path == UNIT
    assert snapshot(parallel / UNIT) == before and unfinished(journal) == []
    recall_unit(burst, UNIT, journal_dir=journal, site=site)
    assert snapshot(burst / UNIT) == before


@pytest.fixture
def site_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("STOREKIT_TIER_JOURNAL", raising=False)
    make_site(tmp_path, POLICIES)
    for n in (100, 200):
        make_unit(tmp_path / "lustre" / RUN / f"step_{n:06d}", seed=n)
    return tmp_path


def _cli(site_dir: Path, *args: str, faults: str = "") -> Ran:
    if not faults:
        return run_in_process([*args, "--json"], cwd=site_dir)
    # a fault point kills the run: its own process
    return run_storekit([*args, "--json"], cwd=site_dir, env={"STOREKIT_FAULTS": faults}, timeout=60)


@pytest.mark.parametrize(  # --fast runs one case of the matrix, CI (slow included) all of them
    ("point", "then"),
    [
        pytest.param(
            point, then, marks=() if (point, then) == ("tier.stubbed", "rerun") else pytest.mark.slow
        )
        for point in ("tier.stubbed", "durable.tombstoned")
        for then in ("rerun", "gc", "recall")
    ],
    ids=lambda v: str(v),
)
def test_a_cli_archive_killed_around_the_free_goes_forward(
    site_dir: Path, point: str, then: str, sk: Callable[..., Ran]
) -> None:
    lustre, vault = site_dir / "lustre", site_dir / "vault"
    journal = lustre / ".storekit-tier-journal"
    src = lustre / UNIT
    before, newest = snapshot(src), snapshot(lustre / RUN / "step_000200")
    killed = _cli(site_dir, "tier", "--archive", "old-runs", faults=f"{point}=kill")
    assert killed.code == -9, killed.stderr
    if then == "rerun":
        ran = _cli(site_dir, "tier", "--archive", "old-runs")
        assert ran.code == 0 and "Traceback" not in ran.stderr, ran.stderr
        assert any(UNIT in line for line in ran.json()["finished_interrupted"])
    elif then == "gc":
        ran = sk(site_dir, "tier", "gc", "--json")
        assert ran.code == 0, ran.stderr
        assert ran.json()["left"] == [] and len(ran.json()["finished"]) == 1
    else:
        ran = sk(site_dir, "tier", "--recall", UNIT, "--json")
        assert ran.code == 0 and "Traceback" not in ran.stderr, ran.stderr
    assert unfinished(journal) == [] and leftovers(site_dir) == []
    assert snapshot(vault / UNIT) == before  # the committed copy, whatever came next
    if then == "recall":  # the unit stays (or is back), the stub is gone
        assert snapshot(src) == before and not stub_path(src).exists()
        again = sk(site_dir, "tier", "--archive", "old-runs", "--json")  # archived again, cleanly
        assert again.code == 0, again.stderr
        by = {r["path"]: (r["status"], r["reason"]) for r in again.json()["results"]}
        assert by[UNIT][0] == "done", by
    assert not os.path.lexists(src)
    stub = read_stub(stub_path(src))
    assert stub is not None and stub.to_tier == "vault"
    assert snapshot(lustre / RUN / "step_000200") == newest  # the newest step: never freed, untouched
    back = sk(site_dir, "tier", "--recall", UNIT, "--json")
    assert back.code == 0, back.stderr
    assert snapshot(src) == before and unfinished(journal) == []


def test_a_rerun_leaves_a_move_another_process_holds(site_dir: Path, sk: Callable[..., Ran]) -> None:
    from storekit.lease import Lease, sibling_lease_path

    src = site_dir / "lustre" / UNIT
    journal = site_dir / "lustre" / ".storekit-tier-journal"
    assert _cli(site_dir, "tier", "--archive", "old-runs", faults="tier.stubbed=kill").code == -9
    held = unfinished(journal)
    assert len(held) >= 1 and src.is_dir() and stub_path(src).is_file()
    with Lease(sibling_lease_path(src), purpose="running tier archive of it elsewhere"):
        ran = sk(site_dir, "tier", "--archive", "old-runs", "--json")
        assert "finished_interrupted" not in ran.json()
        assert unfinished(journal) == held and src.is_dir()  # left to its holder
    ran = sk(site_dir, "tier", "--archive", "old-runs", "--json")
    assert ran.code == 0 and len(ran.json()["finished_interrupted"]) == 1
    assert unfinished(journal) == [] and not src.exists() and stub_path(src).is_file()
