"""`storekit tier` end to end through the CLI with the real mover on POSIX tiers (the archive tier a
local directory): a reviewed plan applied, a unit changed since the plan skipped, stubs, `tier
verify`, `--drain` keeping the newest checkpoint, recall byte-identical, `layout check` clean, and
an archive tier on S3 without credentials refused with one line."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from storekit.tier.stubfile import read_stub, stub_path
from tests.conftest import Ran
from tests.unit.tier.conftest import make_site
from tests.unit.tier.helpers import leftovers, make_unit, snapshot

POLICIES = '[policies.old-runs]\naction = "archive"\nolder_than = "1d"\nkeep_last = 1\n'
RUN1, RUN2 = "checkpoints/run_001", "checkpoints/run_002"


@pytest.fixture
def site_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("STOREKIT_TIER_JOURNAL", raising=False)
    make_site(tmp_path, POLICIES)
    for n in (100, 200, 300):
        make_unit(tmp_path / "lustre" / RUN1 / f"step_{n:06d}", seed=n)
    for n in (500, 600):
        make_unit(tmp_path / "nvme" / RUN2 / f"step_{n:06d}", seed=n)
    return tmp_path


def ok(ran: Ran) -> dict[str, object]:
    assert ran.code == 0, ran.stderr
    assert "Traceback" not in ran.stderr
    doc = ran.json()
    assert isinstance(doc, dict)
    return doc


def statuses(doc: dict[str, object]) -> dict[str, tuple[str, str]]:
    results = doc["results"]
    assert isinstance(results, list)
    return {r["path"].rsplit("/", 1)[1]: (r["status"], r["reason"]) for r in results}


def test_archive_drain_recall_through_the_cli(site_dir: Path, sk: Callable[..., Ran]) -> None:
    lustre, nvme, vault = site_dir / "lustre", site_dir / "nvme", site_dir / "vault"
    before = {n: snapshot(lustre / RUN1 / f"step_{n:06d}") for n in (100, 200, 300)}
    plan = ok(sk(site_dir, "tier", "--archive", "old-runs", "--plan-out", "plan.json", "--json"))
    units = plan["units"]
    assert isinstance(units, list)
    assert [u["src_path"] for u in units] == [f"{RUN1}/step_000100", f"{RUN1}/step_000200"]
    changed = lustre / RUN1 / "step_000200/model/rank0.pt"
    os.utime(changed, ns=(os.stat(changed).st_atime_ns, os.stat(changed).st_mtime_ns + 1))

    done = ok(sk(site_dir, "tier", "--apply", "plan.json", "--json"))
    by = statuses(done)
    assert by["step_000100"][0] == "done"
    assert by["step_000200"][0] == "skipped" and "changed since the plan" in by["step_000200"][1]
    assert not (lustre / RUN1 / "step_000100").exists()
    assert snapshot(vault / RUN1 / "step_000100") == before[100]  # bytes, modes, mtimes, links
    assert (vault / RUN1 / "step_000100.storekit-archive.json").is_file()
    stub = read_stub(stub_path(lustre / RUN1 / "step_000100"))
    assert stub is not None and (stub.action, stub.to_tier, stub.to_path) == (
        "archive",
        "vault",
        f"{RUN1}/step_000100",
    )
    # one result type from the mover to the report: the move's record is in the unit's JSON result
    (moved,) = [r for r in done["results"] if r["path"].endswith("step_000100")]  # type: ignore[attr-defined]
    assert (moved["freed"], moved["dest_url"]) == (True, (vault / RUN1 / "step_000100").as_uri())
    assert (moved["manifest_xxh3_128"], moved["files"]) == (stub.manifest_xxh3, stub.files)
    # where the time went, phase by phase (#36): a move made this run has each of its laps
    assert list(moved["phases"]) == ["plan", "copy", "read_back", "commit", "free"]
    assert all(isinstance(t, float) and t >= 0 for t in moved["phases"].values())
    (skipped,) = [r for r in done["results"] if r["path"].endswith("step_000200")]  # type: ignore[attr-defined]
    assert skipped["phases"] == {}  # nothing moved, nothing timed
    assert (lustre / RUN1 / "step_000200").is_dir() and not (vault / RUN1 / "step_000200").exists()
    assert snapshot(lustre / RUN1 / "step_000300") == before[300]
    again = ok(sk(site_dir, "tier", "--apply", "plan.json", "--json"))  # a rerun of the same plan
    assert statuses(again)["step_000100"] == ("skipped", "gone since the plan was made")

    drained = ok(sk(site_dir, "tier", "--drain", "--json"))
    by = statuses(drained)
    assert by["step_000500"][0] == "done" and by["step_000600"][0] == "done"
    assert not (nvme / RUN2 / "step_000500").exists() and stub_path(nvme / RUN2 / "step_000500").is_file()
    assert (nvme / RUN2 / "step_000600").is_dir()  # the newest checkpoint: copied, never freed
    assert snapshot(lustre / RUN2 / "step_000600") == snapshot(nvme / RUN2 / "step_000600")

    assert ok(sk(site_dir, "tier", "verify", "--json"))["stubs"] == 2
    for tier in ("nvme", "lustre", "vault"):
        check = sk(site_dir, "layout", "check", "--tier", tier, "--json")
        assert check.code == 0, (tier, check.stdout)

    recalled = ok(sk(site_dir, "tier", "--recall", f"{RUN1}/step_000100", "--json"))
    assert [list(r["phases"]) for r in recalled["results"]] == [["plan", "copy", "commit", "free"]]  # type: ignore[attr-defined]
    assert snapshot(lustre / RUN1 / "step_000100") == before[100]
    assert not stub_path(lustre / RUN1 / "step_000100").exists()
    gc = ok(sk(site_dir, "tier", "gc", "--json"))
    assert gc["rolled_back"] == [] and gc["left"] == [] and gc["tombstones"] == []
    assert leftovers(site_dir) == []


def test_an_s3_archive_tier_without_credentials_is_one_line_exit_1(
    site_dir: Path, sk: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(site_dir / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(site_dir / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata lookup
    result = _archive_to_a_closed_s3_port(site_dir, sk, code=1)
    assert "no credentials for tier vault" in result["reason"] and "\n" not in result["reason"]


def test_an_s3_archive_tier_that_is_down_is_exit_5_naming_it_once_its_retry_budget_is_spent(
    site_dir: Path, sk: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing listens at the tier's endpoint: every request is refused and retried until the tier's
    own `retry_budget` (1 s here, 120 s by default) is spent; then exit 5 (retryable), one line naming
    the tier and its URL, the secret nowhere, the unit untouched."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "down-tier-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "down-tier-secret-xyz")
    transfer = '[tiers.vault.transfer]\nretry_budget = "1s"\nthreads = 2\n'
    result = _archive_to_a_closed_s3_port(site_dir, sk, code=5, extra=transfer)
    assert "tier vault (http://127.0.0.1:9)" in result["reason"] and "(1 s)" in result["reason"]
    assert "\n" not in result["reason"]  # the secret: checked in the output by the helper


def _archive_to_a_closed_s3_port(
    site_dir: Path, sk: Callable[..., Ran], *, code: int, extra: str = ""
) -> dict[str, Any]:
    """The vault tier on S3 at a port nothing listens on (+ `extra` config); archive one unit: it
    fails with exit `code` and stays as it was. Returns its result; the output holds no secret."""
    config = (site_dir / "storekit.toml").read_text().replace('url = "./vault"', 'url = "s3://vault/archive"')
    config += '[tiers.vault.options]\nendpoint_url = "http://127.0.0.1:9"\n' + extra
    (site_dir / "storekit.toml").write_text(config)
    before = snapshot(site_dir / "lustre")
    ran = sk(site_dir, "tier", "--archive", f"{RUN1}/step_000100", "--json")
    assert ran.code == code and "Traceback" not in ran.stderr, ran.stderr
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY")
    assert not secret or secret not in ran.stdout + ran.stderr
    (result,) = ran.json()["results"]
    assert result["status"] == "failed" and result["exit_code"] == code
    after = snapshot(site_dir / "lustre")
    assert after.pop(RUN1)[:2] == before.pop(RUN1)[:2]  # its mtime: the unit's lease came and went
    assert after == before  # nothing freed, no stub, no lease left
    return dict(result)


@pytest.mark.parametrize("stale", ["copy", "manifest"])
def test_a_stale_copy_at_the_destination_is_refused_and_left_alone(
    site_dir: Path, sk: Callable[..., Ran], stale: str
) -> None:
    """A copy (or a lone manifest) already where the unit would go, not from this move's journal: the
    unit fails with one line naming it, nothing of the source or the stale copy changes, and the
    other units still move."""
    lustre, vault = site_dir / "lustre", site_dir / "vault"
    there = vault / RUN1 / "step_000100"
    if stale == "copy":
        make_unit(there, seed=999)
    else:
        there.parent.mkdir(parents=True, exist_ok=True)
        there.with_name("step_000100.storekit-archive.json").write_text("{}")
    before_src, before_vault = snapshot(lustre / RUN1), snapshot(vault)
    ran = sk(site_dir, "tier", "--archive", "old-runs", "--json")
    assert ran.code == 1 and "Traceback" not in ran.stderr, ran.stderr
    by = statuses(ran.json())
    status, reason = by["step_000100"]
    assert status == "failed" and "already exists on the destination" in reason and "\n" not in reason
    assert str(there) in reason
    assert by["step_000200"][0] == "done"  # one refusal does not stop the others
    after_src = snapshot(lustre / RUN1)
    kept = {p: s for p, s in before_src.items() if p.startswith("step_000100")}
    assert kept and {p: after_src.get(p) for p in kept} == kept  # the source: kept as it was
    assert not stub_path(lustre / RUN1 / "step_000100").exists()
    after_vault = snapshot(vault)
    old = {p: s for p, s in before_vault.items() if p.startswith(f"{RUN1}/step_000100")}
    assert old and {p: after_vault.get(p) for p in old} == old  # the stale copy: not touched


def test_apply_shows_each_result_once_where_stdout_and_stderr_meet(
    site_dir: Path, sk: Callable[..., Ran]
) -> None:
    """`tier --apply plan.json >log 2>&1` (a terminal, a Slurm log): the per-unit line is logged as
    each unit finishes and the report after it does not repeat it; with stdout alone (a pipe) the
    report still lists every result."""
    import subprocess
    import sys

    from tests.conftest import storekit_env

    assert sk(site_dir, "tier", "--archive", "old-runs", "--plan-out", "plan.json", "-q").code == 0
    assert sk(site_dir, "tier", "--archive", "old-runs", "--plan-out", "plan2.json", "-q").code == 0
    with open(site_dir / "both.log", "w") as log:
        proc = subprocess.run(
            [sys.executable, "-m", "storekit", "tier", "--apply", "plan.json"],
            cwd=site_dir, env=storekit_env(), stdout=log, stderr=subprocess.STDOUT, timeout=120,
        )  # fmt: skip
    text = (site_dir / "both.log").read_text()
    assert proc.returncode == 0, text
    for step in ("step_000100", "step_000200"):
        assert text.count(f"archive {RUN1}/{step}") == 1, text
    assert "2 units: 2 done" in text
    # stdout apart from stderr (a pipe): the report keeps every result; the rerun skips them both
    ran = sk(site_dir, "tier", "--apply", "plan2.json")
    assert ran.code == 0, ran.stderr
    assert [line.split()[0] for line in ran.stdout.splitlines() if RUN1 in line][-2:] == ["skipped"] * 2
