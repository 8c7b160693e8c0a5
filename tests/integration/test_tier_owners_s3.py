"""Owners across a move through the real Ceph RGW (#34 item 2): a user's unit (mode-600 files among
them) archived to the gateway and recalled, both run as root, comes back with the user's uid and gid
on every entry, byte for byte; the manifest in the bucket records them. The drain's POSIX way is
tests/unit/tier/test_owners.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from storekit.config import SiteConfig, TierConfig
from storekit.ops.s3transfer import S3Transfer, TransferConfig
from storekit.tier.mover import archive_unit, recall_unit
from storekit.tier.stubfile import stub_path
from tests.unit.tier.helpers import MiB, make_unit, snapshot

pytestmark = [
    pytest.mark.ceph,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the unit another owner"),
]
SMALL = TransferConfig(min_part_size=5 * MiB, threads=4, max_in_flight_bytes=32 * MiB, range_size=4 * MiB)
USER = 1234
UNIT = "checkpoints/run_001/step_1"


def owners(root: Path) -> set[tuple[int, int]]:
    return {(os.lstat(p).st_uid, os.lstat(p).st_gid) for p in [root, *root.rglob("*")]}


def test_an_archive_to_the_gateway_and_its_recall_as_root_keep_the_users_owner(
    tmp_path: Path, s3_tier: TierConfig
) -> None:
    root, journal = tmp_path / "lustre", tmp_path / "journal"
    make_unit(root / UNIT, seed=34)
    for path in [root / UNIT, *(root / UNIT).rglob("*")]:
        os.lchown(path, USER, USER)
    before = snapshot(root / UNIT)
    assert owners(root / UNIT) == {(USER, USER)}
    assert (root / UNIT / "model/rank0.pt").stat().st_mode & 0o777 == 0o600
    archive_unit(root, UNIT, s3_tier, journal_dir=journal, transfer=SMALL)
    assert not (root / UNIT).exists() and stub_path(root / UNIT).is_file()
    with S3Transfer.for_tier(s3_tier) as engine:
        key = f"storage/{UNIT}.storekit-archive.json"
        manifest = json.loads(engine.client.get_object(Bucket=engine.bucket, Key=key)["Body"].read())
    assert {(e["uid"], e["gid"]) for e in manifest["entries"]} == {(USER, USER)}
    site = SiteConfig(source="<test>", tiers={"archive": s3_tier}, default_tier="archive")
    result = recall_unit(root, UNIT, journal_dir=journal, site=site, transfer=SMALL)
    assert result.not_owned == ()
    assert snapshot(root / UNIT) == before and owners(root / UNIT) == {(USER, USER)}
