"""The layout on the real Ceph RGW: init creates bucket and prefix markers; check and status work."""

from __future__ import annotations

import time

import pytest

from storekit.config import TierConfig
from storekit.layout.check import check_layout
from storekit.layout.init import apply_init, plan_init
from storekit.layout.spec import load_layout
from storekit.layout.status import tier_status
from storekit.store import open_store

pytestmark = pytest.mark.ceph


def test_init_check_status_on_s3(s3_tier: TierConfig) -> None:
    store = open_store(s3_tier)
    spec = load_layout("llm-cluster")
    plan = plan_init(spec, store)
    assert any("no POSIX modes" in s for s in plan.skipped)
    assert not any(a.action == "chmod" for a in plan.actions)
    apply_init(plan, store)
    assert plan_init(spec, store).actions == ()  # idempotent on S3 too
    assert [e.name for e in store.list("")] == ["checkpoints", "datasets", "logs", "models", "scratch"]

    report = check_layout(spec, store)
    assert report.clean, report.findings

    store.write_bytes("checkpoints/run_001/step_000100/model.bin", b"w" * 100)
    store.write_bytes("checkpoints/run_001/step_000200/model.bin", b"w" * 50)
    store.write_bytes("checkpoints/run_001/step_000200/manifest.json", b"{}")
    store.write_bytes("checkpoints/run_2/step_000001/model.bin", b"w")
    store.write_bytes("checkpoints/run_001/latest", b"step_000200\n")
    # Orbax on an object store cannot rename: commit_success.txt is what commits a step there
    store.write_bytes("checkpoints/run_003/10/_CHECKPOINT_METADATA", b"{}")
    store.write_bytes("checkpoints/run_003/10/commit_success.txt", b"ok")
    store.write_bytes("checkpoints/run_003/20/_CHECKPOINT_METADATA", b"{}")
    assert sorted((f.rule, f.path) for f in check_layout(spec, store).findings) == [
        ("misnamed", "checkpoints/run_2")
    ]  # the others were written just now: in progress
    later = time.time() + 86400
    found = sorted((f.rule, f.path, f.message) for f in check_layout(spec, store, now=later).findings)
    assert found == [
        (
            "incomplete-checkpoint",
            "checkpoints/run_001/step_000100",
            "storekit: no manifest.json; torch-dcp: no .metadata or __0.metadata; "
            "orbax: no _CHECKPOINT_METADATA (+ commit_success.txt on this tier: no atomic rename)",
        ),
        (
            "incomplete-checkpoint",
            "checkpoints/run_003/20",
            "orbax: no _CHECKPOINT_METADATA (+ commit_success.txt on this tier: no atomic rename)",
        ),
        ("misnamed", "checkpoints/run_2", found[2][2]),
    ]

    status = tier_status(spec, store)
    assert status.reachable and status.free_bytes is None
    ckpt = next(a for a in status.areas if a.area == "checkpoints")
    assert ckpt.bytes == 100 + 50 + 2 + 1 + 12 + 2 + 2 + 2 and ckpt.files == 8


def test_status_of_unreachable_s3_tier_masks_credentials() -> None:
    tier = TierConfig(
        name="archive",
        url="s3://bucket/storage",
        role="archive",
        options={"endpoint_url": "http://127.0.0.1:9", "key": "AKIDSECRETKEY", "secret": "TOPSECRET"},
    )
    status = tier_status(load_layout("llm-cluster"), open_store(tier))
    assert not status.reachable
    assert status.error is not None and "127.0.0.1:9" in status.error
    assert "TOPSECRET" not in str(status.to_dict()) and "AKIDSECRETKEY" not in str(status.to_dict())
