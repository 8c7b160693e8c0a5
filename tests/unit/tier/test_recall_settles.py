"""A recall never leaves the operator guessing: a unit back beside its stub with no journal to say
why (copied back by hand) is settled when it is the copy the stub names, byte for byte, and refused
with what differs otherwise; a failed recall along a chain leaves no journal; a recall onto a full
tier names that tier and leaves no partial copy. (#34 items 3 and 9, and the free-space bullet.)"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storekit import faults
from storekit.config import SiteConfig
from storekit.errors import NoSpaceError
from storekit.tier.mover import archive_unit, drain_unit, recall_unit
from storekit.tier.moveunit import journal_dir_for
from storekit.tier.stubfile import read_stub, stub_path
from storekit.tier.unitjournal import read_log
from tests.conftest import Ran
from tests.unit.tier.conftest import make_site
from tests.unit.tier.helpers import fill, leftovers, make_unit, posix_site, small_tmpfs, snapshot, unfinished

UNIT = "checkpoints/run_001/step_000100"
KiB = 1024


@pytest.fixture
def drained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SiteConfig:
    """nvme -> lustre: the unit freed on nvme, its stub there, the copy committed on lustre."""
    monkeypatch.delenv("STOREKIT_TIER_JOURNAL", raising=False)
    site = make_site(tmp_path)
    make_unit(tmp_path / "nvme" / UNIT, seed=11)
    drain_unit(tmp_path / "nvme", UNIT, site.tier("lustre"), journal_dir=journal_dir_for(site))
    assert not (tmp_path / "nvme" / UNIT).exists() and stub_path(tmp_path / "nvme" / UNIT).is_file()
    return site


def copy_back_by_hand(tmp_path: Path) -> None:
    """What an operator's `cp -a` of the drained copy does: bytes, modes and mtimes kept."""
    shutil.copytree(tmp_path / "lustre" / UNIT, tmp_path / "nvme" / UNIT, symlinks=True)


def test_a_unit_copied_back_by_hand_beside_its_stub_is_settled_by_a_recall(
    tmp_path: Path, drained: SiteConfig, sk: Callable[..., Ran]
) -> None:
    copy_back_by_hand(tmp_path)
    here, copy = snapshot(tmp_path / "nvme" / UNIT), snapshot(tmp_path / "lustre" / UNIT)
    listed = sk(tmp_path, "ckpt", "list", "run_001", "--tier", "nvme")
    said = listed.stdout + listed.stderr  # what ckpt list hints: the recall below
    assert "stub-beside-unit" in said and "storekit tier --recall" in said, said
    ran = sk(tmp_path, "tier", "--recall", UNIT, "--tier", "nvme", "--json")
    assert ran.code == 0, ran.stderr
    assert [(r["status"], r["state"]) for r in ran.json()["results"]] == [("done", "already-present")]
    assert not stub_path(tmp_path / "nvme" / UNIT).exists()
    assert snapshot(tmp_path / "nvme" / UNIT) == here  # the unit untouched
    assert snapshot(tmp_path / "lustre" / UNIT) == copy  # the copy stays committed, as after a recall
    assert (tmp_path / "lustre" / f"{UNIT}.storekit-archive.json").is_file()
    why = [line.get("reason") for line in read_log(journal_dir_for(drained))]
    assert "the unit here is the copy the stub names, byte for byte" in why
    assert unfinished(journal_dir_for(drained)) == [] and leftovers(tmp_path) == []


def test_a_unit_beside_its_stub_that_is_not_the_copy_is_refused_saying_what_differs(
    tmp_path: Path, drained: SiteConfig, sk: Callable[..., Ran]
) -> None:
    copy_back_by_hand(tmp_path)
    changed = tmp_path / "nvme" / UNIT / "optim/shard/state.bin"
    st = changed.stat()
    os.chmod(changed, 0o644)
    data = bytearray(changed.read_bytes())
    data[7] ^= 1
    changed.write_bytes(bytes(data))
    os.chmod(changed, st.st_mode)
    os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and mtime: only the bytes
    here, stub = snapshot(tmp_path / "nvme" / UNIT), stub_path(tmp_path / "nvme" / UNIT).read_bytes()
    ran = sk(tmp_path, "tier", "--recall", UNIT, "--tier", "nvme", "--json")
    assert ran.code == 1 and "Traceback" not in ran.stderr, ran.stderr
    (failed,) = ran.json()["results"]
    assert failed["status"] == "failed" and "\n" not in failed["reason"]
    assert "not the copy the stub names (optim/shard/state.bin: its bytes differ" in failed["reason"]
    assert "nothing was changed" in failed["reason"]
    assert snapshot(tmp_path / "nvme" / UNIT) == here
    assert stub_path(tmp_path / "nvme" / UNIT).read_bytes() == stub  # both left as they were
    assert unfinished(journal_dir_for(drained)) == []


def test_a_failed_recall_along_a_chain_leaves_no_journal(
    tmp_path: Path, drained: SiteConfig, sk: Callable[..., Ran]
) -> None:
    """Drained, then archived from lustre; the archived copy lost: the recall from the nvme end fails
    (exit 3, 'nothing was changed') and, true to that, no journal of it stays."""
    journal = journal_dir_for(drained)
    archive_unit(tmp_path / "lustre", UNIT, drained.tier("vault"), journal_dir=journal)
    shutil.rmtree(tmp_path / "vault" / UNIT)
    (tmp_path / "vault" / f"{UNIT}.storekit-archive.json").unlink()
    stubs = {t: stub_path(tmp_path / t / UNIT).read_bytes() for t in ("nvme", "lustre")}
    ran = sk(tmp_path, "tier", "--recall", UNIT, "--tier", "nvme", "--json")
    assert ran.code == 3, ran.stderr
    (failed,) = ran.json()["results"]
    assert "is gone; nothing was changed" in failed["reason"]
    assert unfinished(journal) == [] and leftovers(tmp_path) == []
    assert {t: stub_path(tmp_path / t / UNIT).read_bytes() for t in ("nvme", "lustre")} == stubs
    gc = sk(tmp_path, "tier", "gc", "--json")
    assert gc.code == 0 and gc.json()["rolled_back"] == []  # nothing was left for gc to find


@pytest.fixture
def small_burst() -> Iterator[Path]:
    """The burst tier a unit is recalled onto."""
    with small_tmpfs() as where:
        yield where


@pytest.mark.parametrize("when", ["before", "during"])  # refused at the check / filled during the fetch
def test_a_recall_onto_a_full_tier_names_it_and_leaves_nothing(
    tmp_path: Path, small_burst: Path, when: str
) -> None:
    parallel, journal = tmp_path / "parallel", tmp_path / "journal"
    parallel.mkdir()
    make_unit(small_burst / UNIT, big=150 * KiB, seed=12)
    before = snapshot(small_burst / UNIT)
    site = posix_site(small_burst, parallel)
    drain_unit(small_burst, UNIT, site.tier("parallel"), journal_dir=journal)
    stub = stub_path(small_burst / UNIT).read_bytes()
    filler = small_burst / "someone-else.bin"
    arm: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if when == "before":
        fill(small_burst, keep=64 * KiB)  # room for the recall's lease, not for the unit
    else:  # another writer takes what is left once the first file is in

        def take_the_rest() -> None:
            if not filler.exists():
                fill(small_burst)

        arm = faults.at("tier.file-fetched", take_the_rest)
    with arm, pytest.raises(NoSpaceError) as info:
        recall_unit(small_burst, UNIT, journal_dir=journal, site=site)
    assert info.value.exit_code == 6 and info.value.message.startswith("tier burst is full: ")
    assert ("nothing was written" if when == "before" else "the partial copy was removed") in str(info.value)
    assert leftovers(small_burst) == [] and unfinished(journal) == []
    assert not (small_burst / UNIT).exists() and stub_path(small_burst / UNIT).read_bytes() == stub
    assert snapshot(parallel / UNIT) == before
    filler.unlink()
    recall_unit(small_burst, UNIT, journal_dir=journal, site=site)
    assert snapshot(small_burst / UNIT) == before and not stub_path(small_burst / UNIT).exists()
    assert read_stub(stub_path(small_burst / UNIT)) is None
