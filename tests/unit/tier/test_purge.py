"""Purge: a source freed only when its copy is committed, is the same unit byte for byte, and is
verified (read back now, or recorded within verify_max_age); through the CLI's purge policy, refusals,
and a SIGKILL at every point of a purge then a rerun."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from storekit.config import SiteConfig
from storekit.errors import MismatchError
from storekit.tier.audit import gc
from storekit.tier.mover import UnitChanged, UnitResult, archive_unit
from storekit.tier.moveunit import journal_dir_for
from storekit.tier.purge import NoVerifiedCopy, purge_unit
from storekit.tier.stubfile import read_stub, stub_path
from storekit.tier.unitjournal import read_log
from storekit.tier.verified import record_verified
from tests.conftest import Ran
from tests.unit.tier.conftest import make_site
from tests.unit.tier.helpers import (
    count_points,
    leftovers,
    make_unit,
    memory_dir,
    run_killed,
    snapshot,
    unfinished,
)

POLICY = '[policies.purge-archived]\naction = "purge"\nolder_than = "1d"\n'
RUN = "checkpoints/run_001"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SiteConfig:
    monkeypatch.delenv("STOREKIT_TIER_JOURNAL", raising=False)
    site = make_site(tmp_path, POLICY)
    for n in (100, 150, 200, 300):
        make_unit(tmp_path / "lustre" / RUN / f"step_{n:06d}", seed=n)
    return site


def copy_only(site: SiteConfig, unit: str) -> UnitResult:
    lustre = Path(site.source).parent / "lustre"
    return archive_unit(
        lustre, unit, site.tier("vault"), journal_dir=journal_dir_for(site), free_source=False
    )


def purge(site: SiteConfig, unit: str, **kw: float) -> UnitResult:
    lustre = Path(site.source).parent / "lustre"
    return purge_unit(lustre, unit, site.tier("vault"), journal_dir=journal_dir_for(site), **kw)  # type: ignore[arg-type]


def flip_a_bit(path: Path) -> None:
    st = path.stat()
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    os.chmod(path, st.st_mode)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime: only the bytes differ


def test_a_purge_policy_frees_only_units_with_a_verified_copy(
    site: SiteConfig, tmp_path: Path, sk: Callable[..., Ran]
) -> None:
    lustre, vault = tmp_path / "lustre" / RUN, tmp_path / "vault" / RUN
    before = {n: snapshot(lustre / f"step_{n:06d}") for n in (100, 150, 200, 300)}
    for n in (100, 200, 300):
        copy_only(site, f"{RUN}/step_{n:06d}")
    flip_a_bit(lustre / "step_000200/model/rank0.pt")  # the source no longer is what was copied
    ran = sk(tmp_path, "tier", "--policy", "purge-archived", "--json")
    assert ran.code == 0, ran.stderr
    by = {r["path"].rsplit("/", 1)[1]: (r["status"], r["reason"]) for r in ran.json()["results"]}
    assert sorted(by) == ["step_000100", "step_000150", "step_000200"]  # step_000300: the newest, never
    assert by["step_000100"][0] == "done"
    assert by["step_000150"][0] == "skipped" and "no committed copy at" in by["step_000150"][1]
    assert by["step_000200"][0] == "skipped" and "model/rank0.pt: its bytes differ" in by["step_000200"][1]
    assert not (lustre / "step_000100").exists()
    stub = read_stub(stub_path(lustre / "step_000100"))
    assert stub is not None and (stub.action, stub.to_tier) == ("archive", "vault")
    assert snapshot(vault / "step_000100") == before[100]  # the copy untouched by the purge
    for n in (150, 200, 300):
        assert (lustre / f"step_{n:06d}").is_dir() and not stub_path(lustre / f"step_{n:06d}").exists()
    how = [line["how"] for line in read_log(journal_dir_for(site)) if line["action"] == "purge.verified"]
    assert how == ["read back now"]  # no verify_max_age: the copy is read back right before

    back = sk(tmp_path, "tier", "--recall", f"{RUN}/step_000100", "--json")
    assert back.code == 0, back.stderr
    assert snapshot(lustre / "step_000100") == before[100]


def test_a_copy_that_does_not_read_back_is_exit_4_and_nothing_is_freed(
    site: SiteConfig, tmp_path: Path
) -> None:
    unit = f"{RUN}/step_000100"
    copy_only(site, unit)
    before = snapshot(tmp_path / "lustre" / unit)
    flip_a_bit(tmp_path / "vault" / unit / "optim/shard/state.bin")
    with pytest.raises(MismatchError, match="does not read back as its manifest says") as info:
        purge(site, unit)
    assert info.value.exit_code == 4 and "optim/shard/state.bin" in str(info.value)
    assert (
        snapshot(tmp_path / "lustre" / unit) == before and not stub_path(tmp_path / "lustre" / unit).exists()
    )
    assert unfinished(journal_dir_for(site)) == []
    shutil.rmtree(tmp_path / "vault" / unit)
    (tmp_path / "vault" / f"{unit}.storekit-archive.json").unlink()
    with pytest.raises(NoVerifiedCopy, match="no committed copy"):  # skipped, not an error
        purge(site, unit)


def test_verify_max_age_relies_on_a_recent_verification_of_that_very_manifest(
    site: SiteConfig, tmp_path: Path
) -> None:
    journal = journal_dir_for(site)
    units = [f"{RUN}/step_{n:06d}" for n in (100, 150, 200)]
    results = [copy_only(site, u) for u in units]  # each move records its own read-back
    manifest = (tmp_path / "vault" / f"{units[1]}.storekit-archive.json").as_uri()
    record_verified(journal, manifest, results[1].manifest_xxh3_128, at=time.time() - 3 * 86400)  # too old
    manifest = (tmp_path / "vault" / f"{units[2]}.storekit-archive.json").as_uri()
    record_verified(journal, manifest, "0" * 32)  # recent, but of another copy by that name
    for unit in units:
        purge(site, unit, verify_max_age_s=86400.0)
        assert not (tmp_path / "lustre" / unit).exists()
    how = [line["how"] for line in read_log(journal) if line["action"] == "purge.verified"]
    assert how[0].startswith("verified ") and "ago (verify_max_age 24.0h)" in how[0]
    assert how[1:] == ["read back now", "read back now"]


def test_a_unit_changed_after_its_check_is_kept(site: SiteConfig, tmp_path: Path) -> None:
    from storekit import faults

    unit = tmp_path / "lustre" / RUN / "step_000100"
    copy_only(site, f"{RUN}/step_000100")
    touch = faults.at("tier.committed", lambda: os.utime(unit / "manifest.json"))
    with touch, pytest.raises(UnitChanged, match="source was kept, not freed"):
        purge(site, f"{RUN}/step_000100")
    assert unit.is_dir() and not stub_path(unit).exists() and unfinished(journal_dir_for(site)) == []


def test_sigkill_at_every_point_of_a_purge_then_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STOREKIT_TIER_JOURNAL", raising=False)
    base = memory_dir(tmp_path)
    unit = f"{RUN}/step_000100"

    def setup(where: Path) -> tuple[SiteConfig, dict[str, tuple[object, ...]]]:
        where.mkdir()
        site = make_site(where)
        make_unit(where / "lustre" / unit, seed=1)
        copy_only(site, unit)
        return site, snapshot(where / "lustre" / unit)

    try:
        site, _ = setup(base / "probe")
        total = count_points(lambda: purge(site, unit))
        assert total == 6  # committed, stub written, stubbed, the tombstone, source removed, freed
        for n in range(1, total + 1):
            where = base / f"k{n}"
            site, before = setup(where)
            assert run_killed(lambda site=site: purge(site, unit), f"*@{n}=kill")  # type: ignore[misc]
            src, copy = where / "lustre" / unit, where / "vault" / unit
            assert snapshot(copy) == before  # a purge never touches the copy
            assert os.path.lexists(src) or read_stub(stub_path(src)) is not None
            if os.path.lexists(src):
                assert snapshot(src) == before  # whole under its name, or gone with its stub
            if n % 2:
                gc(journal_dir_for(site), roots=[where / "lustre"], site=site)
                assert snapshot(copy) == before
            result = purge(site, unit)
            assert result.freed and not os.path.lexists(src) and read_stub(stub_path(src)) is not None
            assert gc(journal_dir_for(site), roots=[where / "lustre"], site=site).left == []
            assert leftovers(where) == [] and unfinished(journal_dir_for(site)) == []
            shutil.rmtree(where)
    finally:
        if base != tmp_path:
            shutil.rmtree(base)


def test_a_failed_read_back_revokes_every_earlier_verification(site: SiteConfig, tmp_path: Path) -> None:
    """The issue's sequence: a copy-only archive (its read-back recorded), one bit of the copy flipped,
    a purge that reads back (exit 4), then a purge trusting `verify_max_age`: it must not free."""
    unit = f"{RUN}/step_000100"
    copy_only(site, unit)
    before = snapshot(tmp_path / "lustre" / unit)
    flip_a_bit(tmp_path / "vault" / unit / "model/rank1.pt")
    with pytest.raises(MismatchError, match="does not read back"):
        purge(site, unit)
    os.utime(tmp_path / "vault" / unit / "model/rank1.pt")  # whatever the stamp: the failure stands
    with pytest.raises(MismatchError, match="does not read back") as info:
        purge(site, unit, verify_max_age_s=7 * 86400.0)
    assert info.value.exit_code == 4 and "model/rank1.pt" in str(info.value)
    assert snapshot(tmp_path / "lustre" / unit) == before
    assert not stub_path(tmp_path / "lustre" / unit).exists()
    how = [line["how"] for line in read_log(journal_dir_for(site)) if line["action"] == "purge.verified"]
    assert how == []  # never freed on trust


def test_a_copy_changed_since_its_verification_is_read_back_again(site: SiteConfig, tmp_path: Path) -> None:
    """A bit flipped between a copy-only archive and a purge with verify_max_age: the recorded
    verification was of the copy as it stood then; the purge reads back, finds it, frees nothing."""
    unit = f"{RUN}/step_000200"
    copy_only(site, unit)
    before = snapshot(tmp_path / "lustre" / unit)
    flip_a_bit(tmp_path / "vault" / unit / "optim/shard/state.bin")  # same size and mtime
    with pytest.raises(MismatchError, match="does not read back") as info:
        purge(site, unit, verify_max_age_s=7 * 86400.0)
    assert info.value.exit_code == 4 and "optim/shard/state.bin" in str(info.value)
    assert snapshot(tmp_path / "lustre" / unit) == before
    assert not stub_path(tmp_path / "lustre" / unit).exists() and unfinished(journal_dir_for(site)) == []


def test_a_later_whole_read_back_restores_trust(site: SiteConfig, tmp_path: Path) -> None:
    from storekit.tier.verified import record_failed, verified_at

    journal, url = journal_dir_for(site), "file:///x.storekit-archive.json"
    record_verified(journal, url, "d" * 32, stamp="s1", at=100.0)
    assert verified_at(journal, url, "d" * 32, "s1") == 100.0
    assert verified_at(journal, url, "d" * 32, "s2") is None  # the copy changed since
    record_failed(journal, url, "x: expected ...", at=200.0)
    assert verified_at(journal, url, "d" * 32, "s1") is None
    record_verified(journal, url, "d" * 32, stamp="s1", at=300.0)  # read back whole after the failure
    assert verified_at(journal, url, "d" * 32, "s1") == 300.0


def test_a_failed_tier_verify_voids_the_recorded_verification(
    site: SiteConfig, tmp_path: Path, sk: Callable[..., Ran]
) -> None:
    from storekit.tier.verified import last_failure, verified_at

    unit = f"{RUN}/step_000100"
    lustre = tmp_path / "lustre"
    result = archive_unit(lustre, unit, site.tier("vault"), journal_dir=journal_dir_for(site))  # freed
    url = (tmp_path / "vault" / f"{unit}.storekit-archive.json").as_uri()
    journal = journal_dir_for(site)
    assert verified_at(journal, url, result.manifest_xxh3_128) is not None  # the move's own read-back
    flip_a_bit(tmp_path / "vault" / unit / "model/rank0.pt")
    ran = sk(tmp_path, "tier", "verify", unit, "--tier", "lustre", "--json")
    assert ran.code == 4, ran.stdout
    assert verified_at(journal, url, result.manifest_xxh3_128) is None  # no stamp asked: the failure alone
    failure = last_failure(journal, url)
    assert failure is not None and "model/rank0.pt" in failure
