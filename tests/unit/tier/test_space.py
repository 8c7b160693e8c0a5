"""A destination tier without room for the unit: refused before anything is written, naming the
tier that is full (exit 6); a tier that fills up during the copy: the partial copy removed, the error
names the tier and the file written, no journal left, and a rerun once there is room completes.
The full tier is a real small tmpfs (mounted as root; skipped where mounting is not allowed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from storekit import faults
from storekit.errors import NoSpaceError
from storekit.tier.mover import drain_unit
from storekit.tier.stubfile import stub_path
from tests.unit.tier.helpers import fill, leftovers, make_unit, posix_site, small_tmpfs, snapshot, unfinished

UNIT = "checkpoints/run_001/step_100"
KiB = 1024


@pytest.fixture
def small_tier() -> Iterator[Path]:
    """The parallel tier that fills up."""
    with small_tmpfs() as where:
        yield where


def test_a_unit_larger_than_the_free_space_is_refused_before_writing(
    tmp_path: Path, small_tier: Path
) -> None:
    burst, journal = tmp_path / "burst", tmp_path / "journal"
    make_unit(burst / UNIT, big=700 * KiB)
    before = snapshot(burst / UNIT)
    site = posix_site(burst, small_tier)
    with pytest.raises(NoSpaceError) as info:
        drain_unit(burst, UNIT, site.tier("parallel"), journal_dir=journal)
    assert info.value.exit_code == 6
    assert info.value.message.startswith("tier parallel is full: the copy needs ")
    assert "nothing was written" in info.value.message and str(burst) not in info.value.message
    assert list(small_tier.iterdir()) == []  # not even the run directories
    assert snapshot(burst / UNIT) == before and not stub_path(burst / UNIT).exists()
    assert not journal.exists() or unfinished(journal) == []


@pytest.mark.parametrize("when", ["tier.file-copied", "tier.verified"])  # during the copy, at its commit
def test_a_tier_that_fills_up_during_the_copy_keeps_nothing_and_the_rerun_completes(
    tmp_path: Path, small_tier: Path, when: str
) -> None:
    burst, journal = tmp_path / "burst", tmp_path / "journal"
    make_unit(burst / UNIT, big=200 * KiB)
    before = snapshot(burst / UNIT)
    site = posix_site(burst, small_tier)
    filler = small_tier / "someone-else.bin"

    def take_the_rest() -> None:  # another writer, once the first file is in
        if not filler.exists():
            fill(small_tier)

    with faults.at(when, take_the_rest), pytest.raises(NoSpaceError) as info:
        drain_unit(burst, UNIT, site.tier("parallel"), journal_dir=journal)
    assert info.value.exit_code == 6 and info.value.message.startswith("tier parallel is full: ")
    assert str(small_tier) in info.value.message and str(burst) not in info.value.message
    assert leftovers(small_tier) == [] and not (small_tier / UNIT).exists()
    assert sorted(p.name for p in small_tier.iterdir()) == [filler.name]  # not even the run dirs it made
    assert unfinished(journal) == [] and snapshot(burst / UNIT) == before
    filler.unlink()
    result = drain_unit(burst, UNIT, site.tier("parallel"), journal_dir=journal)
    assert result.freed and snapshot(small_tier / UNIT) == before and unfinished(journal) == []
