"""Chained moves: drained (burst -> parallel), then archived from the parallel tier (-> archive).
`tier verify` of the burst stub follows the chain, and `tier --recall` brings the unit back in one
command from either end; every byte, mode and mtime as it was, no stub left on the way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from storekit.config import SiteConfig
from storekit.tier.audit import verify_stub
from storekit.tier.mover import archive_unit, drain_unit
from storekit.tier.moveunit import journal_dir_for
from storekit.tier.stubfile import stub_path
from tests.conftest import Ran
from tests.unit.tier.conftest import make_site
from tests.unit.tier.helpers import leftovers, make_unit, snapshot, unfinished

UNIT = "checkpoints/run_001/step_000100"


@pytest.fixture
def chained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[SiteConfig, dict[str, tuple[object, ...]]]:
    monkeypatch.delenv("STOREKIT_TIER_JOURNAL", raising=False)
    site = make_site(tmp_path)
    make_unit(tmp_path / "nvme" / UNIT, seed=9)
    before = snapshot(tmp_path / "nvme" / UNIT)
    journal = journal_dir_for(site)
    drain_unit(tmp_path / "nvme", UNIT, site.tier("lustre"), journal_dir=journal)
    archive_unit(tmp_path / "lustre", UNIT, site.tier("vault"), journal_dir=journal)
    assert not (tmp_path / "nvme" / UNIT).exists() and not (tmp_path / "lustre" / UNIT).exists()
    assert stub_path(tmp_path / "nvme" / UNIT).is_file() and stub_path(tmp_path / "lustre" / UNIT).is_file()
    return site, before


def test_verify_of_the_burst_stub_follows_the_chain(
    tmp_path: Path, chained: tuple[SiteConfig, dict[str, tuple[object, ...]]]
) -> None:
    site, _ = chained
    result = verify_stub(stub_path(tmp_path / "nvme" / UNIT), site=site)
    assert result.problems == [] and result.files_checked == 7
    assert result.url == (tmp_path / "vault" / UNIT).as_uri()  # where the bytes are now


@pytest.mark.parametrize("end", ["nvme", "lustre"])
def test_recall_from_either_end_in_one_command(
    tmp_path: Path,
    chained: tuple[SiteConfig, dict[str, tuple[object, ...]]],
    sk: Callable[..., Ran],
    end: str,
) -> None:
    _, before = chained
    ran = sk(tmp_path, "tier", "--recall", UNIT, "--tier", end, "--json")
    assert ran.code == 0, ran.stderr
    assert [r["status"] for r in ran.json()["results"]] == ["done"]
    assert snapshot(tmp_path / end / UNIT) == before and not stub_path(tmp_path / end / UNIT).exists()
    if end == "nvme":  # the parallel tier's copy was recalled on the way, and stays committed there
        assert snapshot(tmp_path / "lustre" / UNIT) == before
        assert not stub_path(tmp_path / "lustre" / UNIT).exists()
    else:  # the burst stub names the parallel copy again: its own recall now works as ever
        back = sk(tmp_path, "tier", "--recall", UNIT, "--tier", "nvme", "--json")
        assert back.code == 0 and snapshot(tmp_path / "nvme" / UNIT) == before
    assert leftovers(tmp_path) == [] and unfinished(tmp_path / "lustre" / ".storekit-tier-journal") == []


def test_dataset_list_and_info_show_an_archived_dataset_with_its_stub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sk: Callable[..., Ran]
) -> None:
    from storekit.tier.mover import UnitInfo

    monkeypatch.delenv("STOREKIT_TIER_JOURNAL", raising=False)
    site = make_site(tmp_path)
    rel = "datasets/text/web/v1"
    (tmp_path / "lustre" / rel / "shards").mkdir(parents=True)
    (tmp_path / "lustre" / rel / "shards/part_00000.bin").write_bytes(b"t" * 300)
    (tmp_path / "lustre" / rel / "manifest.json").write_text('{"kind": "dataset"}\n')
    info = UnitInfo(unit_kind="dataset")
    archive_unit(tmp_path / "lustre", rel, site.tier("vault"), journal_dir=journal_dir_for(site), info=info)
    listed = sk(tmp_path, "dataset", "list", "--tier", "lustre", "--json")
    assert listed.code == 0, listed.stderr
    entries = {e["path"]: e for e in listed.json()["datasets"]}
    assert entries[rel]["state"] == "archived" and entries[rel]["bytes"] == 300 + 20
    assert (entries[rel]["stub"]["to_tier"], entries[rel]["stub"]["to_path"]) == ("vault", rel)
    human = sk(tmp_path, "dataset", "list", "--tier", "lustre")
    assert f"{rel}: archived to tier vault ({rel}); storekit tier --recall {rel}" in human.stdout
    shown = sk(tmp_path, "dataset", "info", rel, "--tier", "lustre", "--json")
    assert shown.code == 0, shown.stderr
    assert shown.json()["state"] == "archived" and shown.json()["stub"]["files"] == 2


def test_a_finished_recall_rerun_is_exit_0_and_an_unknown_tier_names_the_option(
    tmp_path: Path, chained: tuple[SiteConfig, dict[str, tuple[object, ...]]], sk: Callable[..., Ran]
) -> None:
    _, before = chained
    assert sk(tmp_path, "tier", "--recall", UNIT, "--tier", "lustre").code == 0
    again = sk(tmp_path, "tier", "--recall", UNIT, "--tier", "lustre", "--json")
    assert again.code == 0, again.stderr
    assert again.json()["results"] == [] and snapshot(tmp_path / "lustre" / UNIT) == before
    assert again.json()["note"] == f"already here, no stub: {UNIT} (nothing to recall)"
    bad = sk(tmp_path, "tier", "--recall", UNIT, "--tier", "nosuch")
    assert bad.code == 3 and bad.stderr.startswith("error: no tier named 'nosuch'"), bad.stderr
