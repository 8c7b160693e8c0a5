"""`tier gc` killed itself: SIGKILL at every fault point and at seeded-random file-system calls of a
gc that rolls back an uncommitted drain, finishes a committed one (after its stub, inside its free)
or finishes a recall after its rename; then gc again. Every byte is whole where it was committed,
the unit ends in exactly the state an uninterrupted gc gives, no journal and nothing left over.
And a run removed by hand after a killed archive: gc and a plain rerun still go on (#34, deliver 3)."""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from storekit.tier.audit import GcReport, gc
from storekit.tier.mover import drain_unit, recall_unit
from storekit.tier.stubfile import stub_path
from tests.conftest import Ran, run_storekit
from tests.unit.tier.conftest import make_site
from tests.unit.tier.helpers import (
    leftovers,
    make_unit,
    memory_dir,
    point_names,
    posix_site,
    run_killed,
    snapshot,
    unfinished,
)
from tests.unit.tier.kills import SEED, io_event_count, killed_at_event, moments

UNIT = "checkpoints/run_001/step_100"
RUN = "checkpoints/run_001"
# what gc meets: (the move, where a kill interrupted it)
CASES = {
    "uncommitted-drain": ("drain", "tier.copied"),  # gc rolls it back
    "stubbed-drain": ("drain", "tier.stubbed"),  # gc frees the source
    "drain-inside-its-free": ("drain", "durable.tombstoned"),  # gc finishes the free
    "renamed-recall": ("recall", "tier.renamed"),  # gc removes the stub
}
RANDOM_KILLS = 10  # per case, beside a kill at every fault point gc reaches


class Case:
    def __init__(self, base: Path, name: str) -> None:
        self.burst, self.parallel, self.journal = base / "burst", base / "parallel", base / "journal"
        self.site = posix_site(self.burst, self.parallel)
        make_unit(self.burst / UNIT, seed=21)
        self.parallel.mkdir()
        self.before = snapshot(self.burst / UNIT)
        action, point = CASES[name]
        if action == "recall":
            self.drain()
            assert run_killed(self.recall, f"{point}=kill")
        else:
            assert run_killed(self.drain, f"{point}=kill")

    def drain(self) -> object:
        return drain_unit(self.burst, UNIT, self.site.tier("parallel"), journal_dir=self.journal)

    def recall(self) -> object:
        return recall_unit(self.burst, UNIT, journal_dir=self.journal, site=self.site)

    def gc(self) -> GcReport:
        return gc(self.journal, roots=[self.burst, self.parallel], site=self.site)

    def state(self) -> tuple[bool, bool, bool]:
        """(the unit at the source, its stub, a committed copy): one of the move's committed ends."""
        src = self.burst / UNIT
        committed = (self.parallel / f"{UNIT}.storekit-archive.json").exists()
        return os.path.lexists(src), stub_path(src).exists(), committed

    def check_whole(self) -> None:
        """Nothing lost, nothing half there: the unit whole at the source, or its stub and a whole
        committed copy (the move's own rule, after any kill)."""
        src = self.burst / UNIT
        if os.path.lexists(src):
            assert snapshot(src) == self.before
        else:
            assert stub_path(src).exists() and self.state()[2]
        if self.state()[2]:
            assert snapshot(self.parallel / UNIT) == self.before


def _after_a_killed_gc(
    base: Path, name: str, expected: tuple[bool, bool, bool], kill: Callable[..., bool]
) -> None:
    case = Case(base, name)
    assert kill(case.gc), f"{base.name}: the kill was not reached"
    case.check_whole()
    case.gc()  # the next gc finds what the killed one left and goes on
    case.check_whole()
    assert unfinished(case.journal) == [], f"{base.name}: a journal outlived gc"
    assert leftovers(base) == [], base.name
    assert case.state() == expected, f"{base.name}: {case.state()} after gc, {expected} without the kill"
    src_here, stub_here, _ = case.state()
    assert src_here != stub_here  # never both, never neither
    if name == "renamed-recall":  # the move asked for, carried on by a plain rerun: done
        case.recall()
        assert case.state() == (True, False, True) and snapshot(case.burst / UNIT) == case.before
    else:
        case.drain()
        assert case.state() == (False, True, True) and snapshot(case.parallel / UNIT) == case.before
    report = case.gc()
    assert report.left == [] and unfinished(case.journal) == [] and leftovers(base) == [], base.name


def _expected(base: Path, name: str) -> tuple[bool, bool, bool]:
    probe = Case(base, name)
    probe.gc()
    assert unfinished(probe.journal) == [] and leftovers(base) == []
    return probe.state()


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if n == "stubbed-drain" else pytest.mark.slow) for n in CASES]
)
def test_sigkill_at_every_point_of_gc_then_gc_again(tmp_path: Path, name: str) -> None:
    base = memory_dir(tmp_path)
    try:
        expected = _expected(base / "probe", name)
        probe = Case(base / "count", name)
        points = point_names(probe.gc)
        assert points or name == "uncommitted-drain"  # a committed move: at least the journal's end
        for n in range(1, len(points) + 1):
            _after_a_killed_gc(base / f"k{n}", name, expected, lambda op, n=n: run_killed(op, f"*@{n}=kill"))
    finally:
        if base.is_relative_to("/dev/shm"):
            shutil.rmtree(base)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("seed", [SEED], ids=lambda s: f"seed={s}")
def test_sigkill_at_random_moments_of_gc_then_gc_again(tmp_path: Path, name: str, seed: int) -> None:
    base = memory_dir(tmp_path)
    try:
        expected = _expected(base / "probe", name)
        total = io_event_count(Case(base / "count", name).gc)
        assert total >= 5
        for n in moments(total, RANDOM_KILLS, salt=f"gc:{name}"):
            _after_a_killed_gc(base / f"m{n}", name, expected, lambda op, n=n: killed_at_event(op, n))
    finally:
        if base.is_relative_to("/dev/shm"):
            shutil.rmtree(base)


@pytest.fixture
def site_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("STOREKIT_TIER_JOURNAL", raising=False)
    make_site(tmp_path, '[policies.old-runs]\naction = "archive"\nolder_than = "1d"\nkeep_last = 1\n')
    for n in (100, 200):
        make_unit(tmp_path / "lustre" / RUN / f"step_{n:06d}", seed=n)
    return tmp_path


@pytest.mark.parametrize("point", ["tier.copied", "tier.stubbed"])  # before its commit, after it
def test_a_run_removed_after_a_killed_archive_does_not_stop_gc_or_a_rerun(
    site_dir: Path, sk: Callable[..., Ran], point: str
) -> None:
    """The operator deletes the run a killed archive was moving (`rm -rf`): no lease can be taken
    there any more. A plain rerun and `tier gc` still go on: the uncommitted copy is rolled back,
    the committed one is kept and named (no stub names it now), and no journal stays."""
    journal = site_dir / "lustre" / ".storekit-tier-journal"
    unit = f"{RUN}/step_000100"
    before = snapshot(site_dir / "lustre" / unit)
    killed = run_storekit(
        ["tier", "--archive", "old-runs", "--json"], cwd=site_dir, env={"STOREKIT_FAULTS": f"{point}=kill"}
    )
    assert killed.code == -9, killed.stderr
    assert unfinished(journal) != []
    shutil.rmtree(site_dir / "lustre" / RUN)
    rerun = sk(site_dir, "tier", "--archive", "old-runs", "--json")
    assert rerun.code == 0 and "Traceback" not in rerun.stderr, rerun.stderr
    if point == "tier.copied":  # a dry run says what gc would do, and does nothing
        held = unfinished(journal)
        dry = sk(site_dir, "tier", "gc", "--dry-run", "--json")
        said = [line.rsplit(": ", 1)[1] for line in dry.json()["rolled_back"]]
        assert dry.code == 0 and said == [f"{site_dir / 'lustre' / RUN} is gone"], dry.stdout
        assert unfinished(journal) == held and leftovers(site_dir) != []
    ran = sk(site_dir, "tier", "gc", "--json")
    assert ran.code == 0, ran.stderr
    assert unfinished(journal) == [] and leftovers(site_dir) == []
    vault = site_dir / "vault" / unit
    if point == "tier.stubbed":  # committed: the copy is all that is left of the unit, and is kept
        assert snapshot(vault) == before and (site_dir / "vault" / f"{unit}.storekit-archive.json").is_file()
        said = rerun.json()["finished_interrupted"]
        assert len(said) == 1 and f"the committed copy stays at {vault.as_uri()}" in said[0]
    else:  # not committed: the partial copy is rolled back by gc
        assert not vault.exists() and ran.json()["rolled_back"] != []
    assert sk(site_dir, "tier", "gc", "--json").json()["rolled_back"] == []


def test_a_killed_drain_of_another_node_is_left_to_that_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sk: Callable[..., Ran]
) -> None:
    """The journals are shared, the burst tier is not: a drain killed on node A after its stub is
    finished by A (its rerun, its gc), never by another node's drain (the Slurm epilog runs one on
    every node) or gc, where the same path is another unit or nothing at all; a drain there of that
    very path waits (exit 5) instead of resuming A's journal against its own unit."""
    monkeypatch.delenv("STOREKIT_TIER_JOURNAL", raising=False)
    make_site(tmp_path)
    nvme, journal = tmp_path / "nvme", tmp_path / "lustre" / ".storekit-tier-journal"
    for run in ("run_001", "run_002"):
        for n in (100, 200):  # the newest of a run is never freed
            make_unit(nvme / f"checkpoints/{run}/step_{n:06d}", seed=n)
    unit = nvme / "checkpoints/run_001/step_000100"
    killed = run_storekit(
        ["tier", "--drain", "checkpoints/run_001", "--json"],
        cwd=tmp_path,
        env={"STOREKIT_FAULTS": "tier.stubbed=kill"},
    )
    assert killed.code == -9, killed.stderr
    (path,) = [journal / n for n in unfinished(journal) if n.count(".") == 1]
    doc = json.loads(path.read_text())
    assert doc["host"] == socket.gethostname()  # each journal says where its move ran
    doc["host"] = "node-a"  # as this node sees node A's journal on the shared tier
    path.write_text(json.dumps(doc))
    kept, before = path.read_bytes(), snapshot(unit)
    here = sk(tmp_path, "tier", "--drain", "checkpoints/run_002", "--json")  # this node's drain
    assert here.code == 0, here.stderr
    assert "finished_interrupted" not in here.json()
    gc_here = sk(tmp_path, "tier", "gc", "--json")
    assert gc_here.code == 0, gc_here.stderr
    assert [line for line in gc_here.json()["left"] if "of host node-a" in line] != []
    assert path.read_bytes() == kept and snapshot(unit) == before and stub_path(unit).is_file()
    aside = tmp_path / "stub-of-node-a"
    stub_path(unit).rename(aside)  # as this node sees the path: its own unit there, no stub
    same = sk(tmp_path, "tier", "--drain", "checkpoints/run_001", "--json")
    failed = [r for r in same.json()["results"] if r["path"] == "checkpoints/run_001/step_000100"]
    assert same.code == 5 and [r["exit_code"] for r in failed] == [5], same.stdout
    assert "on host node-a is not finished" in failed[0]["reason"]  # never resumed here
    assert path.read_bytes() == kept and snapshot(unit) == before and not stub_path(unit).exists()
    aside.rename(stub_path(unit))
    doc["host"] = socket.gethostname()  # node A itself: its next drain finishes the move
    path.write_text(json.dumps(doc))
    there = sk(tmp_path, "tier", "--drain", "checkpoints/run_002", "--json")
    assert there.code == 0 and len(there.json()["finished_interrupted"]) == 1, there.stderr
    assert not unit.exists() and stub_path(unit).is_file() and unfinished(journal) == []


def test_a_damaged_journal_stops_neither_the_other_moves_nor_gc(
    site_dir: Path, sk: Callable[..., Ran]
) -> None:
    """A journal nobody can read (edited by hand, or of another storekit version) used to make every
    plain `tier` run and `tier gc` fail on it (exit 4). Now the moves go on, and gc names it as left
    untouched: which step its move reached is unknown, so nothing is guessed."""
    journal = site_dir / "lustre" / ".storekit-tier-journal"
    journal.mkdir(parents=True, exist_ok=True)
    bad = journal / "0123456789abcdef.json"
    bad.write_text('{"version": 99, "state": "stubbed"}\n')
    ran = sk(site_dir, "tier", "--archive", "old-runs", "--json")
    assert ran.code == 0, ran.stderr
    assert {r["status"] for r in ran.json()["results"]} == {"done"}
    assert not (site_dir / "lustre" / RUN / "step_000100").exists()  # archived and freed
    gc_ran = sk(site_dir, "tier", "gc", "--json")
    assert gc_ran.code == 0, gc_ran.stderr
    (left,) = gc_ran.json()["left"]
    assert left.startswith(f"{bad}: damaged unit journal") and "left as it is" in left
    assert bad.read_text() == '{"version": 99, "state": "stubbed"}\n'


def test_a_killed_drain_whose_burst_tier_is_not_mounted_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sk: Callable[..., Ran]
) -> None:
    """An unmounted tier is not a removed run: gc and a plain rerun leave the journal of a drain
    killed after its stub while its burst tier's root is missing, saying so; once the tier is back
    the move is finished (the source freed, its stub in place)."""
    monkeypatch.delenv("STOREKIT_TIER_JOURNAL", raising=False)
    make_site(tmp_path)
    nvme, journal = tmp_path / "nvme", tmp_path / "lustre" / ".storekit-tier-journal"
    for n in (100, 200):
        make_unit(nvme / f"{RUN}/step_{n:06d}", seed=n)
    unit = nvme / f"{RUN}/step_000100"
    before = snapshot(unit)
    killed = run_storekit(
        ["tier", "--drain", RUN, "--json"], cwd=tmp_path, env={"STOREKIT_FAULTS": "tier.stubbed=kill"}
    )
    assert killed.code == -9, killed.stderr
    held = unfinished(journal)
    nvme.rename(tmp_path / "nvme-not-mounted")  # the node's NVMe not mounted (yet)
    rerun = sk(tmp_path, "tier", "--archive", "datasets", "--tier", "lustre", "--json")  # a plain run
    assert rerun.code == 0 and "finished_interrupted" not in rerun.json(), rerun.stdout
    assert unfinished(journal) == held
    gc_ran = sk(tmp_path, "tier", "gc", "--tier", "lustre", "--json")
    assert gc_ran.code == 0, gc_ran.stderr
    (left,) = gc_ran.json()["left"]
    assert f"its root {nvme} is not there (not mounted?)" in left and left.endswith("the tier is back")
    assert unfinished(journal) == held
    (tmp_path / "nvme-not-mounted").rename(nvme)
    back = sk(tmp_path, "tier", "gc", "--json")
    assert back.code == 0 and len(back.json()["finished"]) == 1, back.stdout
    assert unfinished(journal) == [] and not unit.exists() and stub_path(unit).is_file()
    assert snapshot(tmp_path / "lustre" / RUN / "step_000100") == before
