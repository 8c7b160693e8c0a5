"""`storekit tier` through the CLI with the real mover and the real Ceph RGW as the archive tier: a
reviewed plan applied (a unit changed since the plan skipped), stubs, `tier verify` reading back from
the gateway, recall byte-identical, nothing left for `tier gc`, and no secret in any file written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from storekit.config import TierConfig
from storekit.layout.init import apply_init, plan_init
from storekit.layout.spec import load_layout
from storekit.ops.s3transfer import S3Transfer
from storekit.store import open_store
from storekit.store.s3delete import list_keys
from storekit.tier.stubfile import read_stub, stub_path
from tests.conftest import Ran
from tests.unit.tier.helpers import leftovers, make_unit, snapshot, unfinished

pytestmark = pytest.mark.ceph
RUN = "checkpoints/run_001"


@pytest.fixture
def site_dir(tmp_path: Path, s3_tier: TierConfig, monkeypatch: pytest.MonkeyPatch) -> Path:
    """lustre (parallel, local) and vault (archive, the gateway); credentials only in the environment."""
    monkeypatch.delenv("STOREKIT_TIER_JOURNAL", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_tier.options["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_tier.options["secret"])
    (tmp_path / "storekit.toml").write_text(
        'default_tier = "lustre"\n'
        '[tiers.lustre]\nurl = "./lustre"\nrole = "parallel"\n'
        f'[tiers.vault]\nurl = "{s3_tier.url}"\nrole = "archive"\n'
        f'[tiers.vault.options]\nendpoint_url = "{s3_tier.options["endpoint_url"]}"\n'
        '[policies.old-runs]\naction = "archive"\nolder_than = "1d"\nkeep_last = 1\n'
    )
    lustre = open_store(TierConfig(name="lustre", url=(tmp_path / "lustre").as_uri(), role="parallel"))
    apply_init(plan_init(load_layout("llm-cluster"), lustre), lustre)
    for n in (100, 200, 300):
        make_unit(tmp_path / "lustre" / RUN / f"step_{n:06d}", seed=n)
    return tmp_path


def test_plan_apply_verify_recall_against_the_gateway(
    site_dir: Path, s3_tier: TierConfig, sk: Callable[..., Ran]
) -> None:
    lustre = site_dir / "lustre" / RUN
    before = snapshot(lustre / "step_000100")
    ran = sk(site_dir, "tier", "--archive", "old-runs", "--plan-out", "plan.json", "--json")
    assert ran.code == 0, ran.stderr
    assert [u["src_path"] for u in ran.json()["units"]] == [f"{RUN}/step_000100", f"{RUN}/step_000200"]
    (lustre / "step_000200/extra.bin").write_bytes(b"written after the plan")

    ran = sk(site_dir, "tier", "--apply", "plan.json", "--json")
    assert ran.code == 0, ran.stderr
    by = {r["path"].rsplit("/", 1)[1]: r for r in ran.json()["results"]}
    assert by["step_000100"]["status"] == "done"
    assert (
        by["step_000200"]["status"] == "skipped" and "changed since the plan" in by["step_000200"]["reason"]
    )
    stub = read_stub(stub_path(lustre / "step_000100"))
    assert stub is not None and (stub.to_tier, stub.to_path) == ("vault", f"{RUN}/step_000100")
    assert not (lustre / "step_000100").exists() and (lustre / "step_000200/extra.bin").exists()
    with S3Transfer.for_tier(s3_tier) as engine:
        keys = sorted(k for k in list_keys(engine, "") if not k.endswith("/"))
    files = [rel for rel, v in before.items() if v[0] == "file"]
    assert keys == sorted(
        [f"storage/{RUN}/step_000100/{f}" for f in files]
        + [f"storage/{RUN}/step_000100.storekit-archive.json"]
    )

    verify = sk(site_dir, "tier", "verify", "--json")
    assert verify.code == 0, verify.stderr
    assert (verify.json()["stubs"], verify.json()["files_checked"]) == (1, len(files))
    back = sk(site_dir, "tier", "--recall", f"{RUN}/step_000100", "--json")
    assert back.code == 0, back.stderr
    assert snapshot(lustre / "step_000100") == before and not stub_path(lustre / "step_000100").exists()
    gc = sk(site_dir, "tier", "gc", "--json")
    assert gc.code == 0 and (gc.json()["rolled_back"], gc.json()["left"]) == ([], [])
    assert leftovers(site_dir) == [] and unfinished(site_dir / "lustre/.storekit-tier-journal") == []
    secret = s3_tier.options["secret"].encode()
    for path in site_dir.rglob("*"):  # plan, journal, action log, stubs, manifests
        if path.is_file() and not path.is_symlink():
            assert secret not in path.read_bytes(), path
    assert all(secret.decode() not in r.stdout + r.stderr for r in (ran, verify, back, gc))


def test_wrong_credentials_are_one_line_naming_the_tier_not_exit_5(
    site_dir: Path, s3_tier: TierConfig, sk: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retrying cannot fix a wrong secret: exit 1 (not 5, retryable), one line naming the tier and the
    gateway's answer, the secret nowhere, and the unit kept as it was."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-xyz")
    lustre = site_dir / "lustre" / RUN
    before = snapshot(lustre)
    for what in (("--archive", f"{RUN}/step_000100"), ("--archive", "old-runs")):
        ran = sk(site_dir, "tier", *what, "--json")
        assert ran.code == 1 and "Traceback" not in ran.stderr, ran.stderr
        failed = [r for r in ran.json()["results"] if r["status"] == "failed"]
        assert failed and all(r["exit_code"] == 1 for r in failed)
        for r in failed:
            assert "wrong credentials for tier vault" in r["reason"] and "\n" not in r["reason"], r
        assert "wrong-secret-xyz" not in ran.stdout + ran.stderr
    after = snapshot(lustre)
    after.pop("."), before.pop(".")  # the run directory: its units' leases came and went
    assert after == before  # nothing freed, no stub
