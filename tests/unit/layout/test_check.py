"""layout check: one test per rule, each on a tree that has exactly that violation."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from storekit.layout.check import RULES, check_layout
from storekit.layout.init import apply_init, plan_init
from storekit.layout.spec import LayoutSpec, load_layout, parse_layout
from storekit.store import Store

DAY = 86400.0


@pytest.fixture
def spec() -> LayoutSpec:
    return load_layout("llm-cluster")


@pytest.fixture
def tree(local_store: Store, spec: LayoutSpec) -> Path:
    """A freshly initialised, committed-clean tier with one dataset and one checkpoint."""
    apply_init(plan_init(spec, local_store), local_store)
    root = Path(local_store.root)
    ds = root / "datasets/text/wiki/v1"
    ds.mkdir(parents=True)
    (ds / "part-00000.bin").write_bytes(b"\x01\x00" * 8)
    (ds / "manifest.json").write_text("{}")
    step = root / "checkpoints/run_001/step_001000"
    step.mkdir(parents=True)
    (step / "model.safetensors").write_bytes(b"w" * 100)
    (step / "manifest.json").write_text("{}")
    for p in (ds, ds.parent, step, step.parent):
        os.chmod(p, 0o755)
    for p in ds.iterdir():
        os.chmod(p, 0o644)
    return root


def rules(store: Store, spec: LayoutSpec, now: float | None = None) -> list[tuple[str, str]]:
    return sorted((f.rule, f.path) for f in check_layout(spec, store, now=now).findings)


def test_fresh_tree_is_clean(tree: Path, local_store: Store, spec: LayoutSpec) -> None:
    report = check_layout(spec, local_store)
    assert report.clean, report.findings
    assert report.entries_scanned >= 10


def test_missing_area(tree: Path, local_store: Store, spec: LayoutSpec) -> None:
    (tree / "logs").rmdir()
    assert rules(local_store, spec) == [("missing-area", "logs")]


def test_unknown_top_level_entry(tree: Path, local_store: Store, spec: LayoutSpec) -> None:
    (tree / "junk").mkdir()
    (tree / "notes.txt").write_text("x")
    assert rules(local_store, spec) == [("unknown-entry", "junk"), ("unknown-entry", "notes.txt")]


@pytest.mark.parametrize(
    "bad",
    [
        "checkpoints/run_1",
        "checkpoints/run_001/final weights",
        "checkpoints/run_001/Step.10",
        "datasets/audio",
        "datasets/text/Wiki Dump",
        "datasets/text/wiki/latest",
    ],
)
def test_misnamed(tree: Path, local_store: Store, spec: LayoutSpec, bad: str) -> None:
    (tree / bad).mkdir(parents=True)
    os.chmod(tree / bad, 0o755)
    found = rules(local_store, spec)
    assert found == [("misnamed", bad)]


def test_misnamed_subtree_is_reported_once(tree: Path, local_store: Store, spec: LayoutSpec) -> None:
    (tree / "checkpoints/run_7/step_000001").mkdir(parents=True)  # no manifest, but parent already wrong
    assert rules(local_store, spec) == [("misnamed", "checkpoints/run_7")]


def test_unexpected_file_where_directory_expected(tree: Path, local_store: Store, spec: LayoutSpec) -> None:
    (tree / "checkpoints/run_001/notes.txt").write_text("hi")
    assert rules(local_store, spec) == [("unexpected-file", "checkpoints/run_001/notes.txt")]


def test_incomplete_partial_checkpoint(tree: Path, local_store: Store, spec: LayoutSpec) -> None:
    partial = tree / "checkpoints/run_001/step_002000.partial"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"half")
    assert rules(local_store, spec) == []  # changed just now: its writer may still be running
    later = time.time() + DAY
    assert rules(local_store, spec, now=later) == [("incomplete", "checkpoints/run_001/step_002000.partial")]


def test_incomplete_temp_file_inside_committed_dataset(
    tree: Path, local_store: Store, spec: LayoutSpec
) -> None:
    tmp = tree / "datasets/text/wiki/v1/.part-00001.bin.storekit-tmp-0123abcd"
    tmp.write_bytes(b"x")
    os.chmod(tmp, 0o644)
    assert rules(local_store, spec) == [
        ("incomplete", "datasets/text/wiki/v1/.part-00001.bin.storekit-tmp-0123abcd")
    ]


def test_missing_manifest_checkpoint_step(tree: Path, local_store: Store, spec: LayoutSpec) -> None:
    step = tree / "checkpoints/run_001/step_002000"
    step.mkdir()
    (step / "model.safetensors").write_bytes(b"w")
    later = time.time() + DAY
    assert rules(local_store, spec, now=later) == [
        ("incomplete-checkpoint", "checkpoints/run_001/step_002000")
    ]
    (finding,) = check_layout(spec, local_store, now=later).findings
    assert "storekit: no manifest.json" in finding.message and "torch-dcp: no .metadata" in finding.message


def test_missing_manifest_dataset_version(tree: Path, local_store: Store, spec: LayoutSpec) -> None:
    (tree / "datasets/text/wiki/v1/manifest.json").unlink()
    assert rules(local_store, spec) == [("missing-manifest", "datasets/text/wiki/v1")]


def test_manifest_deeper_down_does_not_commit(tree: Path, local_store: Store, spec: LayoutSpec) -> None:
    step = tree / "checkpoints/run_001/step_003000"
    (step / "shard0").mkdir(parents=True)
    (step / "shard0/manifest.json").write_text("{}")
    assert rules(local_store, spec, now=time.time() + DAY) == [
        ("incomplete-checkpoint", "checkpoints/run_001/step_003000")
    ]


def test_scratch_past_ttl(tree: Path, local_store: Store, spec: LayoutSpec) -> None:
    now = time.time()
    old, fresh = tree / "scratch/job_41", tree / "scratch/job_42"
    for job in (old, fresh):
        job.mkdir()
        (job / "data").write_bytes(b"x")
    for p in (old, old / "data"):
        os.utime(p, (now - 20 * DAY, now - 20 * DAY))
    # a job that keeps writing somewhere deep stays alive even if its top directory is old
    os.utime(fresh, (now - 20 * DAY, now - 20 * DAY))
    assert rules(local_store, spec, now=now) == [("ttl-expired", "scratch/job_41")]


def test_area_with_wrong_mode(tree: Path, local_store: Store, spec: LayoutSpec) -> None:
    os.chmod(tree / "scratch", 0o777)  # lost its sticky bit: users can delete each other's files
    report = check_layout(spec, local_store)
    assert [(f.rule, f.path) for f in report.findings] == [("mode", "scratch")]
    assert "0777" in report.findings[0].message and "1777" in report.findings[0].message


def test_group_writable_in_read_only_area(tree: Path, local_store: Store, spec: LayoutSpec) -> None:
    os.chmod(tree / "datasets/text/wiki/v1/part-00000.bin", 0o664)
    assert rules(local_store, spec) == [("mode", "datasets/text/wiki/v1/part-00000.bin")]


def test_area_over_quota(tree: Path, local_store: Store) -> None:
    text = (Path(__file__).parents[3] / "layouts/llm-cluster.toml").read_text()
    text = text.replace(
        'description = "Training logs, one directory per run or job"',
        'description = "logs"\nquota = "1KiB"\nquota_files = 100',
    )
    spec = parse_layout(text.encode(), source="quota.toml")
    (tree / "logs/run_001.log").write_bytes(b"l" * 2048)
    report = check_layout(spec, local_store)
    assert [(f.rule, f.path) for f in report.findings] == [("quota", "logs")]
    assert "2.0 KiB used" in report.findings[0].message


def test_symlink_pointing_out_of_the_root(
    tree: Path, local_store: Store, spec: LayoutSpec, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tree / "datasets/text/evil").symlink_to(outside)
    (tree / "models/inside").symlink_to(tree / "models")
    assert rules(local_store, spec) == [("symlink-escape", "datasets/text/evil")]


def test_symlinked_area_pointing_out(
    tree: Path, local_store: Store, spec: LayoutSpec, tmp_path: Path
) -> None:
    (tree / "logs").rmdir()
    (tree / "logs").symlink_to(tmp_path)
    assert rules(local_store, spec) == [("symlink-escape", "logs")]


def test_every_rule_is_documented() -> None:
    assert set(RULES) == {
        "missing-area",
        "unknown-entry",
        "misnamed",
        "unexpected-file",
        "incomplete",
        "missing-manifest",
        "ttl-expired",
        "mode",
        "quota",
        "fs-settings",
        "symlink-escape",
        "incomplete-checkpoint",
        "bad-pointer",
        "ambiguous-checkpoint",
        "bad-stub",
        "stub-beside-unit",
    }
