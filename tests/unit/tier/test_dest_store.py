"""A move's destination is the tier's one Store instance: its paths (a symlink out of the tier is
not followed) and its capabilities, probed per instance (no atomic rename: no drain there)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from storekit.errors import ExitCode, PathEscapeError, StorekitError
from storekit.store import PosixStore, open_store
from storekit.tier.mover import drain_unit
from tests.unit.tier.helpers import posix_site, snapshot, unfinished

UNIT = "checkpoints/run_001/step_100"


def test_a_drain_uses_the_capabilities_of_the_store_it_is_given(tiers: tuple[Path, Path, Path]) -> None:
    """The same directory, two store instances: the one whose probe found no atomic rename (as on a
    FUSE view of an object store) is refused before anything is written; the other drains."""
    burst, parallel, journal = tiers
    before = snapshot(burst / UNIT)
    store = open_store(posix_site(burst, parallel).tier("parallel"))
    assert isinstance(store, PosixStore) and store.capabilities.atomic_rename
    no_rename = open_store(store.tier)
    no_rename.__dict__["capabilities"] = dataclasses.replace(store.capabilities, atomic_rename=False)
    with pytest.raises(StorekitError, match=r"tier parallel .* has no atomic rename") as info:
        drain_unit(burst, UNIT, no_rename, journal_dir=journal)
    assert info.value.exit_code == ExitCode.ERROR
    assert list(parallel.iterdir()) == [] and snapshot(burst / UNIT) == before
    assert not journal.exists() or unfinished(journal) == []

    result = drain_unit(burst, UNIT, store, journal_dir=journal)
    assert (result.state, result.freed) == ("done", True)
    assert snapshot(parallel / UNIT) == before


def test_a_symlink_out_of_the_destination_tier_is_not_followed(
    tiers: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """The destination's paths are the store's: a directory of the tier that is a symlink to
    elsewhere is refused (as every store operation refuses it), nothing is written outside."""
    burst, parallel, journal = tiers
    outside = tmp_path / "outside"
    outside.mkdir()
    (parallel / "checkpoints").symlink_to(outside)
    before = snapshot(burst / UNIT)
    with pytest.raises(PathEscapeError, match="outside the root of tier parallel"):
        drain_unit(burst, UNIT, posix_site(burst, parallel).tier("parallel"), journal_dir=journal)
    assert list(outside.iterdir()) == [] and snapshot(burst / UNIT) == before
