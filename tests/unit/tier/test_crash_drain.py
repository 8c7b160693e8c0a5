"""SIGKILL at every fault point a drain or recall reaches (each step of the journal, each file copied,
read back, fetched, the rename, the tombstone), then a rerun (or `tier gc` first, then a rerun): every
byte exists whole in exactly the committed place(s), and nothing is left over after gc."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from storekit.tier.audit import gc
from storekit.tier.mover import drain_unit, recall_unit
from storekit.tier.stubfile import read_stub, stub_path
from tests.unit.tier.helpers import (
    Snapshot,
    leftovers,
    make_unit,
    memory_dir,
    point_names,
    posix_site,
    run_killed,
    snapshot,
    unfinished,
)
from tests.unit.tier.kills import SEED, io_event_count, io_events_until, killed_at_event, moments

UNIT = "checkpoints/run_001/step_100"
FILE_UNIT = "checkpoints/run_001/model_0001.pt"
UNITS = [UNIT, FILE_UNIT, "datasets/tokenized/web/v1"]


def crash_matrix(phases: list[str], units: list[str], *, gc: bool = False) -> list[object]:
    """(phase, unit[, gc_first]) cases, each but one representative marked slow: scripts/test.sh
    --fast runs a drain of one file killed everywhere (the inner loop), CI runs the whole matrix."""
    cases = []
    for phase in phases:
        for unit in units:
            for gc_first in (False, True) if gc else (None,):
                values = (phase, unit) if gc_first is None else (phase, unit, gc_first)
                ident = f"{phase}-{unit}" + (
                    "" if gc_first is None else ("-gc-then-rerun" if gc_first else "-rerun")
                )
                fast = phase == "drain" and unit == FILE_UNIT and gc_first is not False
                cases.append(pytest.param(*values, id=ident, marks=() if fast else pytest.mark.slow))
    return cases


def _setup(base: Path, phase: str, unit: str) -> tuple[Path, Path, Path, Callable[[], object]]:
    burst, parallel, journal = base / "burst", base / "parallel", base / "journal"
    if unit.startswith("datasets/"):  # a dataset version: many small shards and its manifest
        for i in range(24):
            (burst / unit / "shards").mkdir(parents=True, exist_ok=True)
            (burst / unit / "shards" / f"part_{i:05d}.bin").write_bytes(bytes([i]) * (100 + i))
        (burst / unit / "manifest.json").write_text('{"kind": "dataset"}\n')
    elif unit.endswith(".pt"):
        (burst / unit).parent.mkdir(parents=True)
        (burst / unit).write_bytes(b"x" * 5000)
        os.utime(burst / unit, ns=(1, 1_700_000_000_000_000_001))
    else:
        make_unit(burst / unit, seed=7)
    parallel.mkdir()
    site = posix_site(burst, parallel)
    if phase != "drain":
        drain_unit(burst, unit, site.tier("parallel"), journal_dir=journal)
    if phase == "redrain":  # recalled and changed: the next drain replaces its own older copy
        recall_unit(burst, unit, journal_dir=journal, site=site)
        files = [p for p in sorted((burst / unit).rglob("*")) if p.is_file()] or [burst / unit]
        files[0].write_bytes(b"changed after the recall")

    def op() -> object:
        if phase != "recall":
            return drain_unit(burst, unit, site.tier("parallel"), journal_dir=journal)
        return recall_unit(burst, unit, journal_dir=journal, site=site)

    return burst, parallel, journal, op


def _whole_somewhere(
    burst: Path, parallel: Path, unit: str, before: Snapshot, older: tuple[Snapshot, bytes] | None = None
) -> None:
    """After a kill: the unit is whole at the source, or committed whole at the destination with a
    stub naming it; never partly present under its real name. A manifest at the destination always
    describes the copy beside it: the older copy (`older`: its tree, its manifest) or the new one."""
    src, dst = burst / unit, parallel / unit
    manifest = parallel / f"{unit}.storekit-archive.json"
    committed = manifest.exists()
    if os.path.lexists(src):
        assert snapshot(src) == before
    else:
        assert committed and snapshot(dst) == before and read_stub(stub_path(src)) is not None
    if committed:
        if older is not None and manifest.read_bytes() == older[1]:
            assert snapshot(dst) == older[0]
        else:
            assert snapshot(dst) == before


def _one_committed_state(burst: Path, parallel: Path, unit: str, phase: str) -> None:
    """After gc, no half-way state: the unit and its stub never both stand, and a recall that
    committed has its stub gone."""
    src, spath = burst / unit, stub_path(burst / unit)
    assert os.path.lexists(src) != spath.exists(), f"unit {os.path.lexists(src)}, stub {spath.exists()}"
    if not os.path.lexists(src):
        assert (parallel / f"{unit}.storekit-archive.json").exists()


@pytest.mark.parametrize(
    ("phase", "unit", "gc_first"), crash_matrix(["drain", "recall", "redrain"], UNITS, gc=True)
)
def test_sigkill_at_every_point_then_rerun(tmp_path: Path, phase: str, unit: str, gc_first: bool) -> None:
    tmp_path = memory_dir(tmp_path)
    try:
        _every_point(tmp_path, phase, unit, gc_first)
    finally:
        if tmp_path.is_relative_to("/dev/shm"):
            shutil.rmtree(tmp_path)


def _every_point(tmp_path: Path, phase: str, unit: str, gc_first: bool) -> int:
    *_, probe = _setup(tmp_path / "probe", phase, unit)
    reached = point_names(probe)
    total = len(reached)
    if phase == "redrain":  # the swap's every step is among the kill points
        swap = ["tier.replaced-uncommitted", "durable.tombstoned", "tier.renamed", "tier.manifest-written"]
        assert [p for p in reached if p in swap][:4] == swap  # then the source freed (a tombstone)
    assert total >= (12 if unit == UNIT else 8)
    for n in range(1, total + 1):
        _kill_then_rerun(
            tmp_path / f"k{n}", phase, unit, gc_first, lambda op, n=n: run_killed(op, f"*@{n}=kill")
        )
    return total


def _kill_then_rerun(
    base: Path, phase: str, unit: str, gc_first: bool, kill: Callable[[Callable[[], object]], bool]
) -> None:
    """One crash: set up, kill the move (`kill(op)` must report a kill), check that nothing is lost or
    partly present, optionally gc, rerun, and check that the move is done and nothing is left over."""
    burst, parallel, journal, op = _setup(base, phase, unit)
    before = snapshot(burst / unit) if phase != "recall" else snapshot(parallel / unit)
    older = None
    if phase == "redrain":
        older = (snapshot(parallel / unit), (parallel / f"{unit}.storekit-archive.json").read_bytes())
        assert older[0] != before
    assert kill(op), f"{base.name}: the kill was not reached"
    _whole_somewhere(burst, parallel, unit, before, older)
    if gc_first:
        gc(
            journal, roots=[burst, parallel], site=posix_site(burst, parallel)
        )  # an abandoned run cleaned up first: rolled back before its commit, finished after it
        _whole_somewhere(burst, parallel, unit, before, older)
        assert not journal.exists() or unfinished(journal) == [], f"{base.name}: gc left a journal"
        _one_committed_state(burst, parallel, unit, phase)
    op()
    if phase != "recall":
        assert not os.path.lexists(burst / unit) and read_stub(stub_path(burst / unit)) is not None
    else:
        assert snapshot(burst / unit) == before and not stub_path(burst / unit).exists()
    assert snapshot(parallel / unit) == before
    report = gc(journal, roots=[burst, parallel], site=posix_site(burst, parallel))
    assert report.left == []
    assert leftovers(base) == [], base.name
    assert unfinished(journal) == []


RANDOM_KILLS = 12  # per phase and unit: 108 in all, beside the ~500 at fault points above


@pytest.mark.parametrize(("phase", "unit"), crash_matrix(["drain", "recall", "redrain"], UNITS))
@pytest.mark.parametrize("seed", [SEED], ids=lambda s: f"seed={s}")
def test_sigkill_at_random_moments_then_rerun(tmp_path: Path, phase: str, unit: str, seed: int) -> None:
    """Kills inside the steps: just before a seeded-random N-th file-system call of the move (an open,
    mkdir, chmod, utime, rename, unlink, listing...), while the copy threads are mid-file."""
    base = memory_dir(tmp_path)
    try:
        *_, probe = _setup(base / "probe", phase, unit)
        total = io_event_count(probe)
        assert total >= 20
        for i, n in enumerate(moments(total, RANDOM_KILLS, salt=f"{phase}:{unit}")):
            _kill_then_rerun(base / f"m{n}", phase, unit, i % 2 == 1, lambda op, n=n: killed_at_event(op, n))
    finally:
        if base.is_relative_to("/dev/shm"):
            shutil.rmtree(base)


AROUND_THE_FREE_KILLS = 6  # per phase and unit, drawn after the commit: the stub, the tombstone, the free


@pytest.mark.parametrize(("phase", "unit"), crash_matrix(["drain", "redrain"], [UNIT, FILE_UNIT]))
@pytest.mark.parametrize("seed", [SEED], ids=lambda s: f"seed={s}")
def test_sigkill_at_random_moments_around_the_stub_and_the_free(
    tmp_path: Path, phase: str, unit: str, seed: int
) -> None:
    """Kills at seeded-random file-system calls after the commit: writing the stub (its temp, its
    rename), recording it, renaming the source to its tombstone, emptying the tombstone, and the
    journal's last steps. gc then leaves one committed state and no journal; the rerun finishes."""
    base = memory_dir(tmp_path)
    try:
        *_, probe = _setup(base / "probe", phase, unit)
        committed, total = io_events_until(probe, "tier.committed")
        assert 0 < committed < total - 5
        window = moments(total - committed, AROUND_THE_FREE_KILLS, salt=f"free:{phase}:{unit}")
        for i, k in enumerate(window):
            n = committed + k
            _kill_then_rerun(base / f"f{n}", phase, unit, i % 2 == 0, lambda op, n=n: killed_at_event(op, n))
    finally:
        if base.is_relative_to("/dev/shm"):
            shutil.rmtree(base)
