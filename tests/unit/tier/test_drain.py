"""Drain (POSIX -> POSIX) and recall of a drained unit: exact trees, stubs, the action log, refusals."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from storekit.config import SiteConfig
from storekit.errors import NotFoundError, StorekitError
from storekit.tier.audit import gc, verify_stub
from storekit.tier.mover import UnitChanged, UnitResult, drain_unit, recall_unit
from storekit.tier.stubfile import read_stub, stub_path
from storekit.tier.unitjournal import read_log
from tests.unit.tier.helpers import leftovers, make_unit, posix_site, snapshot, unfinished

UNIT = "checkpoints/run_001/step_100"


def _site(tiers: tuple[Path, Path, Path]) -> SiteConfig:
    return posix_site(tiers[0], tiers[1])


def drain(tiers: tuple[Path, Path, Path], unit: str = UNIT, **kw: Any) -> UnitResult:
    return drain_unit(tiers[0], unit, _site(tiers).tier("parallel"), journal_dir=tiers[2], **kw)


def recall(tiers: tuple[Path, Path, Path], unit: str = UNIT) -> UnitResult:
    return recall_unit(tiers[0], unit, journal_dir=tiers[2], site=_site(tiers))


def test_drain_then_recall_is_exact(tiers: tuple[Path, Path, Path]) -> None:
    burst, parallel, journal = tiers
    before = snapshot(burst / UNIT)
    result = drain(tiers)
    assert (result.state, result.freed, result.files) == ("done", True, 7)
    assert not (burst / UNIT).exists()
    assert snapshot(parallel / UNIT) == before  # bytes, modes, mtimes, links, empty file and dir
    stub = read_stub(stub_path(burst / UNIT))
    assert stub is not None and (stub.to_tier, stub.to_path) == ("parallel", UNIT)
    assert stub.manifest == f"{UNIT}.storekit-archive.json" and (stub.is_file, stub.dirs) == (False, 5)
    assert (stub.files, stub.bytes, stub.manifest_xxh3) == (7, result.bytes, result.manifest_xxh3_128)
    manifest = json.loads((parallel / "checkpoints/run_001/step_100.storekit-archive.json").read_bytes())
    assert {e["path"] for e in manifest["entries"]} == set(before)
    assert verify_stub(stub_path(burst / UNIT), site=_site(tiers)).problems == []

    back = recall(tiers)
    assert (back.state, back.freed) == ("done", True)
    assert snapshot(burst / UNIT) == before
    assert not stub_path(burst / UNIT).exists()
    assert leftovers(burst) == [] and leftovers(parallel) == [] and unfinished(journal) == []
    actions = [line["action"] for line in read_log(journal)]
    assert actions == [
        "drain.copy", "drain.copied", "drain.verified", "drain.committed", "drain.freed",
        "recall.copy", "recall.verified", "recall.committed", "recall.stub-removed",
    ]  # fmt: skip
    verified = next(line for line in read_log(journal) if line["action"] == "drain.verified")
    assert (
        verified["files"]["model/rank0.pt"]
        == manifest["entries"][[e["path"] for e in manifest["entries"]].index("model/rank0.pt")]["xxh3_128"]
    )


def test_copy_only_keeps_the_source_and_writes_no_stub(tiers: tuple[Path, Path, Path]) -> None:
    burst, parallel, _journal = tiers
    before = snapshot(burst / UNIT)
    result = drain(tiers, free_source=False)
    assert not result.freed
    assert snapshot(burst / UNIT) == before == snapshot(parallel / UNIT)
    assert not stub_path(burst / UNIT).exists()


def test_a_unit_changed_after_planning_is_rolled_back_not_freed(tiers: tuple[Path, Path, Path]) -> None:
    from storekit import faults

    burst, parallel, journal = tiers

    def touch() -> None:
        with open(burst / UNIT / "model/rank1.pt", "ab") as fh:
            fh.write(b"more")

    with faults.at("tier.copying", touch), pytest.raises(UnitChanged, match="changed since it was planned"):
        drain(tiers)
    assert (burst / UNIT / "model/rank1.pt").stat().st_size == 65_540
    assert os.listdir(parallel) == []  # the partial copy is gone, and so are the run dirs it made
    assert not stub_path(burst / UNIT).exists() and unfinished(journal) == []


def test_a_file_written_during_its_copy_fails_the_unit(tiers: tuple[Path, Path, Path]) -> None:
    from storekit import faults

    burst, _parallel, _journal = tiers

    def grow() -> None:
        with open(burst / UNIT / "model/rank0.pt", "ab") as fh:
            fh.write(b"x")

    with faults.at("tier.file-copied", grow), pytest.raises(StorekitError, match="changed"):
        drain(tiers)
    assert (burst / UNIT).is_dir() and not stub_path(burst / UNIT).exists()


def test_refusals(tiers: tuple[Path, Path, Path]) -> None:
    _burst, parallel, _journal = tiers
    with pytest.raises(NotFoundError, match="no such unit"):
        drain(tiers, "checkpoints/run_001/step_999")
    (parallel / UNIT).mkdir(parents=True)
    with pytest.raises(StorekitError, match="already exists on the destination"):
        drain(tiers)
    with pytest.raises(NotFoundError, match="no such stub"):
        recall(tiers, "checkpoints/run_001/step_999")


def test_a_stub_whose_copy_is_gone_is_exit_3_and_changes_nothing(tiers: tuple[Path, Path, Path]) -> None:
    burst, parallel, journal = tiers
    drain(tiers)
    (parallel / "checkpoints/run_001/step_100.storekit-archive.json").unlink()
    stub_before = stub_path(burst / UNIT).read_bytes()
    with pytest.raises(NotFoundError, match="is gone") as info:
        recall(tiers)
    assert info.value.exit_code == 3
    assert stub_path(burst / UNIT).read_bytes() == stub_before
    assert unfinished(journal) == []  # a failed recall leaves no journal behind: nothing to resume
    report = gc(journal, roots=[burst], site=_site(tiers))
    assert report.rolled_back == [] and leftovers(burst) == []
    assert (
        verify_stub(stub_path(burst / UNIT), site=_site(tiers)).problems[0].endswith("(the archive is gone)")
    )


def test_verify_finds_a_flipped_bit(tiers: tuple[Path, Path, Path]) -> None:
    burst, parallel, _journal = tiers
    drain(tiers)
    victim = parallel / UNIT / "optim/shard/state.bin"
    os.chmod(victim, 0o644)
    data = bytearray(victim.read_bytes())
    data[100] ^= 1
    victim.write_bytes(bytes(data))
    problems = verify_stub(stub_path(burst / UNIT), site=_site(tiers)).problems
    assert len(problems) == 1 and "optim/shard/state.bin: expected 1234 bytes" in problems[0]


def test_move_unit_carries_out_plan_units(
    tiers: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from storekit.tier.moveunit import JOURNAL_DIR, move_unit

    burst, parallel, _ = tiers
    monkeypatch.delenv("STOREKIT_TIER_JOURNAL", raising=False)
    before = snapshot(burst / UNIT)
    common = {"unit_kind": "checkpoint", "writer": "storekit", "step": 100, "free_source": True}
    out = move_unit(
        SimpleNamespace(
            action="drain", src_tier="burst", src_path=UNIT, dst_tier="parallel", dst_path=UNIT, **common
        ),
        site=_site(tiers),
    )
    assert (out.status, out.exit_code) == ("done", 0) and out.bytes > 0
    # the mover's own result, its reason filled in for the report (one type, not three)
    assert isinstance(out, UnitResult) and (out.path, out.action, out.freed) == (UNIT, "drain", True)
    assert out.reason == "done" and out.dest_url == (parallel / UNIT).as_uri()
    stub = read_stub(stub_path(burst / UNIT))
    assert stub is not None and (stub.writer, stub.step, stub.unit_kind) == ("storekit", 100, "checkpoint")
    assert (parallel / JOURNAL_DIR / "actions.log").exists()  # the journal is on the shared tier
    back = move_unit(
        SimpleNamespace(
            action="recall", src_tier="parallel", src_path=UNIT, dst_tier="burst", dst_path=UNIT, **common
        ),
        site=_site(tiers),
    )
    assert back.status == "done" and snapshot(burst / UNIT) == before


def test_a_unit_changed_after_its_commit_is_kept_and_loses_its_stub(tiers: tuple[Path, Path, Path]) -> None:
    from storekit import faults

    burst, parallel, journal = tiers

    def touch() -> None:
        os.utime(burst / UNIT / "manifest.json")

    with faults.at("tier.stubbed", touch), pytest.raises(UnitChanged, match="source was kept, not freed"):
        drain(tiers)
    assert (burst / UNIT / "manifest.json").exists() and not stub_path(burst / UNIT).exists()
    assert (parallel / "checkpoints/run_001/step_100.storekit-archive.json").exists()  # the copy is committed
    assert unfinished(journal) == []


def test_drain_recall_drain_again_replaces_the_units_own_older_copy(tiers: tuple[Path, Path, Path]) -> None:
    """The unit's own copy, left at the destination by a recall, is replaced by the next drain: the
    new copy made and read back beside it, then swapped in; one copy and one manifest remain."""
    burst, parallel, journal = tiers
    drain(tiers)
    recall(tiers)
    manifest = parallel / f"{UNIT}.storekit-archive.json"
    old_manifest = manifest.read_bytes()

    again = drain(tiers)  # the same bytes: nothing to change but the copy's manifest is rewritten
    assert (again.state, again.freed) == ("done", True) and not (burst / UNIT).exists()
    recall(tiers)
    (burst / UNIT / "model/rank1.pt").write_bytes(b"new weights")
    before = snapshot(burst / UNIT)

    third = drain(tiers)
    assert (third.state, third.freed) == ("done", True) and not (burst / UNIT).exists()
    assert snapshot(parallel / UNIT) == before  # the new bytes, exactly
    assert manifest.read_bytes() != old_manifest
    stub = read_stub(stub_path(burst / UNIT))
    assert stub is not None and stub.manifest_xxh3 == third.manifest_xxh3_128
    assert verify_stub(stub_path(burst / UNIT), site=_site(tiers)).problems == []
    one_copy = ["step_100", "step_100.storekit-archive.json"]
    assert sorted(os.listdir(parallel / "checkpoints/run_001")) == one_copy
    assert leftovers(burst) == [] and leftovers(parallel) == [] and unfinished(journal) == []
    recall(tiers)
    assert snapshot(burst / UNIT) == before


def test_a_change_during_a_redrain_keeps_the_older_copy_committed(tiers: tuple[Path, Path, Path]) -> None:
    """A rollback of the second drain removes only its own temp copy: the older copy stays whole and
    committed, the source stays whole."""
    from storekit import faults

    burst, parallel, journal = tiers
    drain(tiers)
    recall(tiers)
    manifest = parallel / f"{UNIT}.storekit-archive.json"
    old, old_manifest = snapshot(parallel / UNIT), manifest.read_bytes()

    def touch() -> None:
        with open(burst / UNIT / "model/rank1.pt", "ab") as fh:
            fh.write(b"more")

    with faults.at("tier.copying", touch), pytest.raises(UnitChanged, match="changed since it was planned"):
        drain(tiers)
    assert snapshot(parallel / UNIT) == old and manifest.read_bytes() == old_manifest
    assert (burst / UNIT / "model/rank1.pt").stat().st_size == 65_540
    assert leftovers(parallel) == [] and unfinished(journal) == []


def test_a_committed_copy_of_another_source_is_refused_and_kept(tiers: tuple[Path, Path, Path]) -> None:
    """Another burst tier's unit at the same relative path drained first: its copy (which its stub
    names) is never replaced by this unit's drain."""
    burst, parallel, journal = tiers
    other = burst.parent / "burst2"
    make_unit(other / UNIT, seed=2)
    drain_unit(other, UNIT, posix_site(other, parallel).tier("parallel"), journal_dir=journal)
    kept, manifest = snapshot(parallel / UNIT), (parallel / f"{UNIT}.storekit-archive.json").read_bytes()
    source = snapshot(burst / UNIT)
    with pytest.raises(StorekitError, match="holds an archive of another unit"):
        drain(tiers)
    assert snapshot(parallel / UNIT) == kept
    assert (parallel / f"{UNIT}.storekit-archive.json").read_bytes() == manifest
    assert snapshot(burst / UNIT) == source and not stub_path(burst / UNIT).exists()
    assert verify_stub(stub_path(other / UNIT), site=posix_site(other, parallel)).problems == []
