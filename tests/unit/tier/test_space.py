"""A destination tier without room for the unit: refused before anything is written, naming the
tier that is full (exit 6); a tier that fills up during the copy: the partial copy removed, the error
names the tier and the file written, no journal left, and a rerun once there is room completes.
The full tier is a real small tmpfs (mounted as root; skipped where mounting is not allowed)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from storekit import faults
from storekit.errors import NoSpaceError
from storekit.tier.mover import drain_unit
from storekit.tier.stubfile import stub_path
from tests.unit.tier.helpers import leftovers, make_unit, posix_site, snapshot, unfinished

UNIT = "checkpoints/run_001/step_100"
KiB = 1024


@pytest.fixture
def small_tier() -> Iterator[Path]:
    """A 512 KiB tmpfs: the parallel tier that fills up."""
    where = Path(tempfile.mkdtemp(prefix="storekit-full-"))
    ran = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(where)], capture_output=True
    )
    if ran.returncode != 0:
        os.rmdir(where)
        pytest.skip(f"cannot mount a small tmpfs here: {ran.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)
        os.rmdir(where)


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

    def fill() -> None:  # another writer takes what is left, once the first file is in
        if not filler.exists():
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                while True:
                    os.write(fd, b"\0" * 4 * KiB)
            except OSError:
                pass  # full
            finally:
                os.close(fd)

    with faults.at(when, fill), pytest.raises(NoSpaceError) as info:
        drain_unit(burst, UNIT, site.tier("parallel"), journal_dir=journal)
    assert info.value.exit_code == 6 and info.value.message.startswith("tier parallel is full: ")
    assert str(small_tier) in info.value.message and str(burst) not in info.value.message
    assert leftovers(small_tier) == [] and not (small_tier / UNIT).exists()
    assert sorted(p.name for p in small_tier.iterdir()) == [filler.name]  # not even the run dirs it made
    assert unfinished(journal) == [] and snapshot(burst / UNIT) == before
    filler.unlink()
    result = drain_unit(burst, UNIT, site.tier("parallel"), journal_dir=journal)
    assert result.freed and snapshot(small_tier / UNIT) == before and unfinished(journal) == []
