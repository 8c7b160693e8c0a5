"""`ckpt prune` takes a unit's tier lease before deleting it: never under a running archive or drain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storekit.checkpoint import commit
from storekit.lease import Lease, sibling_lease_path
from tests.unit.tier.helpers import snapshot

RUN = "storage/checkpoints/run_001"


def test_prune_waits_for_a_unit_a_tier_move_holds(tmp_path: Path, sk: Any) -> None:
    assert sk(tmp_path, "init", "--quiet").returncode == 0
    for step in (100, 200):
        with commit(tmp_path / RUN, step) as stage, stage.open("model.bin") as fh:
            fh.write(bytes([step % 7]) * 1000)
    unit = tmp_path / RUN / "step_000100"
    before = snapshot(unit)
    with Lease(sibling_lease_path(unit), purpose=f"running tier archive of {unit}"):
        ran = sk(tmp_path, "ckpt", "prune", "run_001", "--keep-last", "1", "--json")
        assert ran.returncode == 5, ran.stderr
        assert ran.json()["error"]["exit_code"] == 5 and ".step_000100.storekit-lease" in ran.stderr
        assert snapshot(unit) == before  # an archive reading it meanwhile reads every byte
    again = sk(tmp_path, "ckpt", "prune", "run_001", "--keep-last", "1", "--json")
    assert again.returncode == 0, again.stderr
    assert not unit.exists() and (tmp_path / RUN / "step_000200").is_dir()
