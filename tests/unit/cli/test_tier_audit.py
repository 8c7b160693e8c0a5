"""`storekit tier verify` and `storekit tier gc` through the CLI: read-back of every drained unit, a
flipped bit found (exit 4), samples, damaged stubs; gc of a killed drain and of a tombstone, and a
--dry-run that changes nothing."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from storekit.config import load_config
from storekit.tier.mover import drain_unit
from storekit.tier.moveunit import JOURNAL_DIR, JOURNAL_ENV, journal_dir_for
from storekit.tier.stubfile import stub_path
from tests.conftest import Ran
from tests.unit.tier.conftest import tree_state
from tests.unit.tier.helpers import leftovers, make_unit, run_killed, unfinished

RUN = "checkpoints/run_001"
CONFIG = """\
[tiers.burst]
url = "./burst"
role = "burst"
[tiers.parallel]
url = "./parallel"
role = "parallel"
"""


@pytest.fixture
def site_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(JOURNAL_ENV, raising=False)
    (tmp_path / "storekit.toml").write_text(CONFIG)
    for step in (100, 200):
        make_unit(tmp_path / "burst" / RUN / f"step_{step}", seed=step)
    (tmp_path / "parallel").mkdir()
    return tmp_path


def drain(site_dir: Path, unit: str) -> object:
    site = load_config(str(site_dir / "storekit.toml"))
    return drain_unit(
        site_dir / "burst", unit, site.tier("parallel"), journal_dir=journal_dir_for(site), free_source=True
    )


def error_line(ran: Ran) -> str:
    lines = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in ran.stderr, ran.stderr
    return lines[0]


def test_verify_reads_back_every_stub_and_names_a_flipped_bit(site_dir: Path, sk: Callable[..., Ran]) -> None:
    for step in (100, 200):
        drain(site_dir, f"{RUN}/step_{step}")
    ran = sk(site_dir, "tier", "verify", "--json")
    assert ran.code == 0, ran.stderr
    doc = ran.json()
    assert (doc["ok"], doc["stubs"], doc["files_checked"]) == (True, 2, 14)
    assert doc["bytes_checked"] == 2 * sum(
        p.stat().st_size
        for p in (site_dir / "parallel" / RUN / "step_100").rglob("*")
        if p.is_file() and not p.is_symlink()
    )
    human = sk(site_dir, "tier", "verify", f"{RUN}/step_200")
    assert human.code == 0 and human.stdout.startswith("OK ") and human.stdout.count("\n") == 1

    victim = site_dir / "parallel" / RUN / "step_200/model/rank1.pt"
    os.chmod(victim, 0o644)
    data = bytearray(victim.read_bytes())
    data[9] ^= 4
    victim.write_bytes(bytes(data))
    bad = sk(site_dir, "tier", "verify", "--json")
    assert bad.code == 4
    results = {Path(r["stub"]).name: r["problems"] for r in bad.json()["results"]}
    assert results["step_100.storekit-stub"] == []
    assert len(results["step_200.storekit-stub"]) == 1
    assert "step_200/model/rank1.pt: expected 65536 bytes" in results["step_200.storekit-stub"][0]
    human = sk(site_dir, "tier", "verify", RUN)
    assert human.code == 4 and "FAILED" in human.stdout and "model/rank1.pt" in human.stdout

    sample = sk(site_dir, "tier", "verify", f"{RUN}/step_100", "--sample", "0.3", "--seed", "5", "--json")
    assert sample.code == 0 and 1 <= sample.json()["files_checked"] < 7
    again = sk(site_dir, "tier", "verify", f"{RUN}/step_100", "--sample", "0.3", "--seed", "5", "--json")
    assert again.json()["results"] == sample.json()["results"]  # the same seed reads the same files


def test_verify_reports_a_damaged_stub_and_refuses_bad_input(site_dir: Path, sk: Callable[..., Ran]) -> None:
    drain(site_dir, f"{RUN}/step_100")
    stub_path(site_dir / "burst" / RUN / "step_100").write_text("{not json")
    ran = sk(site_dir, "tier", "verify", "--json")
    assert ran.code == 4 and "Traceback" not in ran.stderr
    (result,) = ran.json()["results"]
    assert result["problems"] and "step_100.storekit-stub" in result["problems"][0]
    missing = sk(site_dir, "tier", "verify", "checkpoints/run_404")
    assert missing.code == 3 and "checkpoints/run_404: not found" in error_line(missing)
    assert sk(site_dir, "tier", "verify", "--sample", "0").code == 2
    assert sk(site_dir, "tier", "verify", "--tier", "nope").code == 3


def test_gc_rolls_back_a_killed_drain_and_dry_run_changes_nothing(
    site_dir: Path, sk: Callable[..., Ran]
) -> None:
    unit = f"{RUN}/step_100"
    before = tree_state(site_dir / "burst")
    assert run_killed(lambda: drain(site_dir, unit), "tier.file-copied@3=kill")
    journal = site_dir / "parallel" / JOURNAL_DIR
    assert leftovers(site_dir / "parallel")  # the partial copy in its temp sibling
    state = tree_state(site_dir)
    dry = sk(site_dir, "tier", "gc", "--dry-run", "--json")
    assert dry.code == 0, dry.stderr
    assert len(dry.json()["rolled_back"]) == 1 and dry.json()["dry_run"] is True
    assert tree_state(site_dir) == state  # nothing removed, nothing written (not even a lock)

    ran = sk(site_dir, "tier", "gc", "--json")
    assert ran.code == 0, ran.stderr
    assert ran.json()["rolled_back"] == dry.json()["rolled_back"] and ran.json()["left"] == []
    assert leftovers(site_dir) == [] and unfinished(journal) == []
    after = tree_state(site_dir / "burst")
    assert after.pop(RUN)[:2] == before.pop(RUN)[:2]  # its mtime: the leases came and went
    assert after == before  # the source untouched, no lease left
    assert sk(site_dir, "tier", "gc").stdout == "nothing to collect\n"


def test_gc_removes_tombstones_and_finishes_committed_moves(site_dir: Path, sk: Callable[..., Ran]) -> None:
    unit = f"{RUN}/step_200"
    assert run_killed(lambda: drain(site_dir, unit), "durable.tombstoned=kill")  # killed freeing the source
    tombs = leftovers(site_dir / "burst")
    assert len(tombs) == 1 and not (site_dir / "burst" / unit).exists()
    dry = sk(site_dir, "tier", "gc", "--dry-run")
    assert dry.code == 0 and f"would remove: {site_dir / 'burst' / tombs[0]}" in dry.stdout
    assert "stubbed" not in dry.stdout and "would finish: " in dry.stdout and "drain committed" in dry.stdout
    ran = sk(site_dir, "tier", "gc", "--tier", "burst", "--json")
    assert ran.code == 0 and ran.json()["tombstones"] == [str(site_dir / "burst" / tombs[0])]
    assert ran.json()["left"] == [] and len(ran.json()["finished"]) == 1 and leftovers(site_dir) == []
    assert unfinished(site_dir / "parallel" / JOURNAL_DIR) == []  # no journal outlives gc
    assert not (site_dir / "burst" / unit).exists() and stub_path(site_dir / "burst" / unit).is_file()
    drain(site_dir, unit)  # a rerun: already moved
    assert sk(site_dir, "tier", "gc", "--json").json()["left"] == []
    assert sk(site_dir, "tier", "verify", unit).code == 0
