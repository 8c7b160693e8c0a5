"""A move's source, and a recall's target, are reached through their tier's Store: a directory of
the tier swapped for a symlink out of it (after the plan was made) is refused before anything is
read, copied, written or freed — the tree it leads to is another's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from storekit.errors import ExitCode, PathEscapeError
from storekit.store import open_store
from storekit.tier.mover import drain_unit, recall_unit
from storekit.tier.purge import purge_unit
from storekit.tier.stubfile import stub_path
from tests.unit.tier.helpers import make_unit, posix_site, snapshot, unfinished

UNIT = "checkpoints/run_001/step_100"


@pytest.fixture
def linked_tiers(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """burst (its checkpoints/ a symlink to `elsewhere`, which holds a unit at the same path), parallel,
    journal, elsewhere."""
    burst, parallel, journal, elsewhere = (
        tmp_path / n for n in ("burst", "parallel", "journal", "elsewhere")
    )
    make_unit(elsewhere / "run_001/step_100", seed=3)
    burst.mkdir()
    parallel.mkdir()
    (burst / "checkpoints").symlink_to(elsewhere)
    return burst, parallel, journal, elsewhere


@pytest.mark.parametrize("given", ["store", "root"])
def test_a_unit_behind_a_symlink_out_of_its_tier_is_neither_copied_nor_freed(
    linked_tiers: tuple[Path, Path, Path, Path], given: str
) -> None:
    burst, parallel, journal, elsewhere = linked_tiers
    before = snapshot(elsewhere)
    site = posix_site(burst, parallel)
    src = open_store(site.tier("burst")) if given == "store" else burst
    with pytest.raises(PathEscapeError, match=r"resolves to .*elsewhere.*outside the root of tier") as info:
        drain_unit(src, UNIT, site.tier("parallel"), journal_dir=journal)
    assert info.value.exit_code == ExitCode.USAGE
    assert snapshot(elsewhere) == before  # not freed, not stubbed, no lease left beside it
    assert list(parallel.iterdir()) == []
    assert not journal.exists() or unfinished(journal) == []


def test_a_purge_behind_a_symlink_out_of_its_tier_frees_nothing(
    linked_tiers: tuple[Path, Path, Path, Path],
) -> None:
    """Even with a committed copy of those very bytes on the other tier, the purge names the escape."""
    burst, parallel, journal, elsewhere = linked_tiers
    real = burst.parent / "real-burst"
    shutil.copytree(elsewhere, real / "checkpoints")
    site = posix_site(real, parallel)
    drain_unit(real, UNIT, site.tier("parallel"), journal_dir=journal, free_source=False)
    before = snapshot(elsewhere)
    with pytest.raises(PathEscapeError, match="outside the root of tier burst"):
        purge_unit(
            open_store(posix_site(burst, parallel).tier("burst")),
            UNIT,
            site.tier("parallel"),
            journal_dir=journal,
        )
    assert snapshot(elsewhere) == before


def test_a_recall_into_a_directory_swapped_for_a_symlink_writes_nothing_there(tmp_path: Path) -> None:
    """The unit was drained (its stub on burst); then burst's checkpoints/ became a link to another
    tree holding a copy of that stub: the recall refuses, the other tree and the copy stay as they were."""
    burst, parallel, journal, elsewhere = (
        tmp_path / n for n in ("burst", "parallel", "journal", "elsewhere")
    )
    make_unit(burst / UNIT, seed=4)
    parallel.mkdir()
    site = posix_site(burst, parallel)
    drain_unit(burst, UNIT, site.tier("parallel"), journal_dir=journal)
    stub = stub_path(burst / UNIT)
    (elsewhere / "run_001").mkdir(parents=True)
    shutil.copy2(stub, elsewhere / "run_001" / stub.name)
    shutil.move(burst / "checkpoints", tmp_path / "moved-away")
    (burst / "checkpoints").symlink_to(elsewhere)
    before, copy = snapshot(elsewhere), snapshot(parallel)
    with pytest.raises(PathEscapeError, match="outside the root of tier burst"):
        recall_unit(open_store(site.tier("burst")), UNIT, journal_dir=journal, site=site)
    assert snapshot(elsewhere) == before and snapshot(parallel) == copy
    assert unfinished(journal) == []
