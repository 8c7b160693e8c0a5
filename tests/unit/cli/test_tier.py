"""`storekit tier`: --dry-run creates nothing, --plan-out/--apply carry out exactly the reviewed plan,
edited or stale plans are refused with one line, changed units are skipped, --json everywhere."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from storekit.stubs import render_stub
from storekit.tier.apply import apply_plan
from storekit.tier.plan import PlanUnit, body_digest, load_plan
from tests.conftest import Ran
from tests.unit.tier.conftest import DAY, aged, dcp_unit, make_site, tree_state
from tests.unit.tier.helpers import ARCHIVED

POLICIES = '[policies.old-runs]\naction = "archive"\nolder_than = "1d"\nkeep_last = 1\n'


@pytest.fixture
def site_dir(tmp_path: Path) -> Path:
    make_site(tmp_path, POLICIES)
    run = tmp_path / "lustre/checkpoints/run_001"
    for step in (100, 200, 300):
        dcp_unit(run, f"step_{step:06d}")
    dcp_unit(run, "step_000400", complete=False)
    burst = tmp_path / "nvme/checkpoints/run_001"
    dcp_unit(burst, "step_000300")
    (run / "step_000050.storekit-stub").write_bytes(render_stub(ARCHIVED))
    return tmp_path


def only_error_line(ran: Ran) -> str:
    lines = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, ran.stderr
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ("--archive", "old-runs"),
        ("--archive", "checkpoints/run_001"),
        ("--policy", "old-runs"),
        ("--drain",),
        ("--drain", "checkpoints"),
        ("--recall", "checkpoints/run_001"),
    ],
)
def test_dry_run_creates_nothing_and_says_what_why_and_where(
    site_dir: Path, sk: Callable[..., Ran], args: tuple[str, ...]
) -> None:
    before = tree_state(site_dir)
    human = sk(site_dir, "tier", *args, "--dry-run")
    assert human.code == 0, human.stderr
    assert human.stdout.startswith("would ")
    ran = sk(site_dir, "tier", *args, "--dry-run", "--json")
    assert ran.code == 0, ran.stderr
    doc = ran.json()
    assert doc["schema_version"] == 1 and doc["dry_run"] is True and doc["kind"] == "storekit-tier-plan"
    for unit in doc["units"]:  # type: ignore[attr-defined]
        assert unit["src_tier"] and unit["dst_tier"] and unit["reason"] and unit["bytes"] > 0
    assert tree_state(site_dir) == before  # byte-identical, same inodes and mtimes: no lock, no journal


def test_archive_policy_plan_lists_what_moves(site_dir: Path, sk: Callable[..., Ran]) -> None:
    doc = sk(site_dir, "tier", "--archive", "old-runs", "--dry-run", "--json").json()
    units = {u["src_path"]: u for u in doc["units"]}  # type: ignore[attr-defined]
    assert sorted(units) == ["checkpoints/run_001/step_000100", "checkpoints/run_001/step_000200"]
    u = units["checkpoints/run_001/step_000100"]
    assert (u["src_tier"], u["dst_tier"], u["free_source"], u["files"], u["bytes"]) == (
        "lustre", "vault", True, 3, 204
    )  # fmt: skip
    assert "unchanged for 5.0d" in u["reason"]
    passed = {p["path"]: p["reason"] for p in doc["passed"]}  # type: ignore[attr-defined]
    assert "one of the 1 newest" in passed["checkpoints/run_001/step_000300"]
    assert passed["checkpoints/run_001/step_000400"].startswith("incomplete: never moved as if whole")
    drain = sk(site_dir, "tier", "--drain", "--dry-run", "--json").json()
    assert [(u["src_tier"], u["dst_tier"], u["free_source"]) for u in drain["units"]] == [  # type: ignore[attr-defined]
        ("nvme", "lustre", False)  # the newest checkpoint of its run: flushed, never freed
    ]


def test_recall_plans_from_stubs(site_dir: Path, sk: Callable[..., Ran]) -> None:
    for target in ("checkpoints/run_001", "checkpoints/run_001/step_000050", "checkpoints"):
        doc = sk(site_dir, "tier", "--recall", target, "--dry-run", "--json").json()
        assert [
            (u["action"], u["src_tier"], u["src_path"], u["dst_tier"], u["dst_path"], u["stub_manifest_xxh3"])
            for u in doc["units"]  # type: ignore[attr-defined]
        ] == [("recall", "vault", ARCHIVED.to_path, "lustre", ARCHIVED.to_path, ARCHIVED.manifest_xxh3)]
        assert doc["passed"] == []  # only stubs are looked at
    drained = replace(ARCHIVED, unit="step_000060", action="drain", to_tier="lustre")
    (site_dir / "nvme/checkpoints/run_001/step_000060.storekit-stub").write_bytes(render_stub(drained))
    listing = sk(site_dir, "ckpt", "list", "run_001", "--tier", "nvme")
    assert "drained to lustre:checkpoints/run_001/step_000050" in listing.stdout  # its to_path


def make_plan(site_dir: Path, sk: Callable[..., Ran]) -> Path:
    ran = sk(site_dir, "tier", "--archive", "old-runs", "--plan-out", "plan.json", "--json")
    assert ran.code == 0, ran.stderr
    assert ran.json()["plan_out"] == "plan.json"
    return site_dir / "plan.json"


def test_apply_dry_run_checks_every_fingerprint_and_skips_changed_units(
    site_dir: Path, sk: Callable[..., Ran]
) -> None:
    make_plan(site_dir, sk)
    before = tree_state(site_dir)
    doc = sk(site_dir, "tier", "--apply", "plan.json", "--dry-run", "--json").json()
    assert [(r["path"], r["status"]) for r in doc["results"]] == [  # type: ignore[attr-defined]
        ("checkpoints/run_001/step_000100", "done"),
        ("checkpoints/run_001/step_000200", "done"),
    ]
    unit = site_dir / "lustre/checkpoints/run_001/step_000100"
    os.utime(unit / "__0_0.distcp")  # touched: same bytes, new mtime
    (site_dir / "lustre/checkpoints/run_001/step_000200/extra.bin").write_bytes(b"x")
    before = tree_state(site_dir)
    doc = sk(site_dir, "tier", "--apply", "plan.json", "--dry-run", "--json").json()
    results = {r["path"].rsplit("/", 1)[1]: r for r in doc["results"]}  # type: ignore[attr-defined]
    assert all(r["status"] == "skipped" for r in results.values())
    assert "changed since the plan" in results["step_000100"]["reason"]
    assert "changed since the plan" in results["step_000200"]["reason"]
    assert tree_state(site_dir) == before


def test_an_edited_plan_is_refused_with_one_line_exit_4(site_dir: Path, sk: Callable[..., Ran]) -> None:
    plan = make_plan(site_dir, sk)
    doc = json.loads(plan.read_text())
    doc["units"][0]["free_source"] = not doc["units"][0]["free_source"]
    plan.write_text(json.dumps(doc))
    for extra in ((), ("--dry-run",), ("--json",)):
        ran = sk(site_dir, "tier", "--apply", "plan.json", *extra)
        assert ran.code == 4, ran.stderr
        assert "changed after it was made (digest mismatch)" in only_error_line(ran)
    plan.write_text("{not json")
    assert sk(site_dir, "tier", "--apply", "plan.json").code == 2


def redigest(plan: Path, **changes: object) -> None:
    """What a plan made under other circumstances looks like (valid digest, other facts)."""
    from storekit.config import load_config
    from storekit.tier.plankey import plan_key

    doc = json.loads(plan.read_text())
    doc.pop("digest")
    doc.update(changes)
    doc["digest"] = body_digest(doc, plan_key(load_config(str(plan.parent / "storekit.toml")), create=False))
    plan.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"created": 1.0}, "the plan is stale"),
        ({"tiers": {"lustre": "file:///else", "vault": "file:///v", "nvme": "file:///n"}}, "when planned"),
    ],
)
def test_a_stale_plan_or_one_for_other_tiers_is_refused_exit_1(
    site_dir: Path, sk: Callable[..., Ran], changes: dict[str, object], words: str
) -> None:
    plan = make_plan(site_dir, sk)
    redigest(plan, **changes)
    ran = sk(site_dir, "tier", "--apply", "plan.json", "--json")
    assert ran.code == 1 and words in only_error_line(ran)
    assert ran.json()["error"]["exit_code"] == 1  # type: ignore[index]


def test_a_drain_plan_made_on_another_node_is_refused(site_dir: Path, sk: Callable[..., Ran]) -> None:
    ran = sk(site_dir, "tier", "--drain", "--plan-out", "drain.json")
    assert ran.code == 0, ran.stderr
    redigest(site_dir / "drain.json", host="other-node")
    ran = sk(site_dir, "tier", "--apply", "drain.json")
    assert ran.code == 1 and "made on other-node for node-local tier nvme" in only_error_line(ran)


def test_apply_hands_the_mover_only_unchanged_units_and_rechecks_what_it_frees(site_dir: Path) -> None:
    """The loop around the mover: the mover itself is tiermove's; here a recorder stands in for it."""
    from storekit.config import load_config

    site = load_config(str(site_dir / "storekit.toml"))
    plan_file = site_dir / "plan.json"
    from storekit.tier.plan import PlanRequest, build_plan, render_plan

    plan_file.write_bytes(render_plan(build_plan(site, PlanRequest(site.policies["old-runs"])), site))
    plan = load_plan(plan_file.read_bytes(), "plan.json", site)
    run = site_dir / "lustre/checkpoints/run_001"
    (run / "step_000100/__1_0.distcp").write_bytes(b"rewritten")  # changed since planned
    os.rename(run / "step_000300", site_dir / "step_000300.moved-away")  # step_000200 is now the newest
    handed: list[PlanUnit] = []

    def recorder(unit: PlanUnit, *, site: object) -> object:
        handed.append(unit)
        return None

    results = apply_plan(plan, site, mover=recorder)
    assert handed == []
    by = {r.path.rsplit("/", 1)[1]: r for r in results}
    assert by["step_000100"].status == "skipped" and "changed since the plan" in by["step_000100"].reason
    assert by["step_000200"].status == "skipped"
    assert by["step_000200"].reason == "no longer may be freed: the newest complete checkpoint of its run"
    os.rename(site_dir / "step_000300.moved-away", run / "step_000300")
    results = apply_plan(plan, site, mover=recorder)
    assert [u.src_path for u in handed] == ["checkpoints/run_001/step_000200"]
    assert handed[0].stats is not None and handed[0].stats.digest == handed[0].fingerprint
    assert [r.status for r in results] == ["skipped", "done"]


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        ((), 2, "exactly one of"),
        (("--archive", "old-runs", "--drain"), 2, "exactly one of"),
        (("--archive", "old-runs", "--dry-run", "--plan-out", "p.json"), 2, "--dry-run writes nothing"),
        (("--archive", "nothing/here", "--dry-run"), 2, "layout llm-cluster has no area 'nothing'"),
        (("--archive", "checkpoints/run_999", "--dry-run"), 3, "checkpoints/run_999: no such unit, run"),
        (("--recall", "checkpoints/run_001/step_000999", "--dry-run"), 3, "no stub"),
        (("--recall", "checkpoints/run_002", "--dry-run"), 3, "no stub"),
        (("--policy", "nope", "--dry-run"), 3, "no policy named 'nope'"),
        (("--drain", "old-runs", "--dry-run"), 2, "policy old-runs is a archive policy"),
        (("--apply", "missing.json"), 3, "plan file missing.json does not exist"),
        (("--archive", "s3://b/x", "--dry-run"), 2, "not a URL"),
    ],
)
def test_usage_errors_are_one_line_with_their_exit_code(
    site_dir: Path, sk: Callable[..., Ran], args: tuple[str, ...], code: int, words: str
) -> None:
    if not args:
        args = ("--dry-run",)
    ran = sk(site_dir, "tier", *args, "--json")
    assert ran.code == code, ran.stderr
    doc = ran.json()
    if code:
        assert words in only_error_line(ran) and doc["error"]["exit_code"] == code  # type: ignore[index]


def test_one_drain_per_node_a_second_is_busy(site_dir: Path) -> None:
    from storekit.config import load_config
    from storekit.errors import BusyError
    from storekit.layout.check import check_layout
    from storekit.layout.spec import load_layout
    from storekit.lease import Lease
    from storekit.policies import adhoc_policy
    from storekit.store import open_store
    from storekit.tier.apply import DRAIN_LOCK
    from storekit.tier.plan import PlanRequest, build_plan

    site = load_config(str(site_dir / "storekit.toml"))
    plan = build_plan(site, PlanRequest(adhoc_policy("drain")))
    assert [u.src_path for u in plan.units] == ["checkpoints/run_001/step_000300"]
    handed: list[str] = []

    def recorder(unit: PlanUnit, *, site: object) -> None:
        handed.append(unit.src_path)

    with Lease(site_dir / "nvme" / DRAIN_LOCK, purpose="another drain"):
        with pytest.raises(BusyError):
            apply_plan(plan, site, mover=recorder)
        report = check_layout(load_layout("llm-cluster"), open_store(site.tier("nvme")))
        assert report.findings == [] and report.in_progress == [DRAIN_LOCK]  # a drain runs: not a finding
    assert handed == []
    apply_plan(plan, site, mover=recorder)
    assert handed == ["checkpoints/run_001/step_000300"]
    assert not (site_dir / "nvme" / DRAIN_LOCK).exists()  # released


def test_committed_datasets_are_units_and_uncommitted_ones_are_not(
    site_dir: Path, sk: Callable[..., Ran]
) -> None:
    base = site_dir / "lustre/datasets/text/web"
    for version, committed in (("v1", True), ("v2", False)):
        (base / version).mkdir(parents=True)
        (base / version / "train-00000.bin").write_bytes(b"t" * 64)
        if committed:
            (base / version / "manifest.json").write_text("{}")
        aged(base / version, 3 * DAY)
    doc = sk(site_dir, "tier", "--archive", "datasets/text", "--dry-run", "--json").json()
    assert [(u["src_path"], u["unit_kind"], u["files"], u["free_source"]) for u in doc["units"]] == [  # type: ignore[attr-defined]
        ("datasets/text/web/v1", "dataset", 2, True)
    ]
    why = "incomplete: never moved as if whole (no manifest.json: not committed)"
    assert doc["passed"] == [{"path": "datasets/text/web/v2", "state": "incomplete", "reason": why}]


def test_a_plan_edited_by_hand_with_its_digest_recomputed_is_refused(
    site_dir: Path, sk: Callable[..., Ran]
) -> None:
    """The digest is keyed with the site's secret: recomputing a plain hash over an edited plan (as
    anyone could) does not make it pass; nothing is written outside the tiers."""
    import xxhash

    plan = make_plan(site_dir, sk)
    doc = json.loads(plan.read_text())
    doc.pop("digest")
    doc["units"][0]["dst_path"] = "checkpoints/../../escape/x"
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    doc["digest"] = xxhash.xxh3_128_hexdigest(canonical.encode("ascii"))  # what the old digest was
    plan.write_text(json.dumps(doc))
    before = tree_state(site_dir)
    ran = sk(site_dir, "tier", "--apply", "plan.json", "--json")
    assert ran.code == 4 and "digest mismatch" in ran.json()["error"]["message"]  # type: ignore[index]
    assert tree_state(site_dir) == before and not (site_dir.parent / "escape").exists()
    key = site_dir / "lustre" / ".storekit-tier-journal" / "plan.key"
    assert key.stat().st_mode & 0o777 == 0o600 and key.read_bytes().hex() not in plan.read_text()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("dst_path", "checkpoints/../../escape/x"),
        ("src_path", "/etc"),
        ("dst_path", "a//b"),
        ("action", "nuke"),
    ],
)
def test_a_plan_path_outside_its_tier_is_refused_even_with_a_valid_digest(
    site_dir: Path, sk: Callable[..., Ran], key: str, value: str
) -> None:
    plan = make_plan(site_dir, sk)
    doc = json.loads(plan.read_text())
    doc["units"][0][key] = value
    redigest(plan, units=doc["units"])
    before = tree_state(site_dir)
    for extra in ((), ("--dry-run",)):
        ran = sk(site_dir, "tier", "--apply", "plan.json", *extra)
        assert ran.code == 2, ran.stderr
        assert f"plan.json: units[0].{key}: " in only_error_line(ran)
    assert tree_state(site_dir) == before and not (site_dir.parent / "escape").exists()


def test_the_mover_refuses_a_destination_path_that_leaves_its_tier(site_dir: Path) -> None:
    from storekit.config import load_config
    from storekit.errors import UsageError
    from storekit.tier.mover import archive_unit, drain_unit

    site = load_config(str(site_dir / "storekit.toml"))
    run = "checkpoints/run_001"
    src = site_dir / "lustre"
    before = tree_state(site_dir)
    for move in (archive_unit, drain_unit):
        with pytest.raises(UsageError, match="leaves its tier"):
            move(
                src,
                f"{run}/step_000100",
                site.tier("vault"),
                journal_dir=site_dir / "j",
                dst_rel="x/../../../esc",
            )
    assert tree_state(site_dir) == before and not (site_dir / "j").exists()


def test_plan_out_into_a_missing_directory_or_apply_of_a_directory_is_one_line(
    site_dir: Path, sk: Callable[..., Ran]
) -> None:
    ran = sk(site_dir, "tier", "--archive", "old-runs", "--plan-out", "no/such/dir/plan.json")
    assert ran.code == 3 and "Traceback" not in ran.stderr
    assert "--plan-out no/such/dir/plan.json" in only_error_line(ran)
    ran = sk(site_dir, "tier", "--apply", "lustre", "--json")
    assert ran.code == 2 and "Traceback" not in ran.stderr
    assert "a directory, not a plan file" in ran.json()["error"]["message"]  # type: ignore[index]


@pytest.mark.parametrize("read_only", ["vault", "lustre"])  # the destination; the source and journal tier
def test_a_read_only_tier_is_one_line_with_its_exit_code(
    site_dir: Path, sk: Callable[..., Ran], read_only: str
) -> None:
    import subprocess

    where = site_dir / read_only
    if subprocess.run(["mount", "--bind", str(where), str(where)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here (not root?)")
    try:
        remount = ["mount", "-o", "remount,ro,bind", str(where)]
        assert subprocess.run(remount, capture_output=True).returncode == 0
        before = tree_state(site_dir)
        ran = sk(site_dir, "tier", "--archive", "old-runs", "--json")
        assert ran.code != 0 and "Traceback" not in ran.stderr and "internal error" not in ran.stdout
        doc = ran.json()
        if "error" in doc:  # the journal tier itself: one error document
            assert "read-only file system" in doc["error"]["message"].lower()
        else:  # each unit failed in one line, with a storage exit code
            assert {r["status"] for r in doc["results"]} == {"failed"}
            assert all("read-only file system" in r["reason"].lower() for r in doc["results"])
        after = tree_state(site_dir)
        steps = [k for k in before if "/step_" in k]  # every unit byte for byte (leases came and went)
        assert steps and [after.get(k) for k in steps] == [before[k] for k in steps]
    finally:
        subprocess.run(["umount", str(where)], check=True)


def test_a_moved_units_line_says_where_its_time_went() -> None:
    from storekit.cli.tier import _timing
    from storekit.tier.mover import UnitResult

    laps = {"plan": 0.5, "copy": 14.0, "read_back": 6.0, "commit": 0.5, "free": 0.0}
    moved = UnitResult(path="run/step_1", action="archive", bytes=3 << 30, phases=laps)
    assert _timing(moved) == (
        " (3.0 GiB in 21.0s, 153 MB/s: plan 0.5s, copy 14.0s, read_back 6.0s, commit 0.5s, free 0.0s)"
    )
    assert _timing(UnitResult(path="run/step_2", action="archive", status="skipped")) == ""
