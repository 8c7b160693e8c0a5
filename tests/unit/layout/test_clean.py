"""`storekit layout clean`: expired scratch entries go (tombstoned), live ones and Slurm jobs' stay."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest

from storekit import faults
from storekit.config import TierConfig
from storekit.durable import TOMBSTONE_MARK
from storekit.errors import NoSpaceError
from storekit.layout.clean import SlurmUnreachable, apply_clean, job_ids_in_name, plan_clean
from storekit.layout.spec import load_layout
from storekit.lease import Lease, sibling_lease_path
from storekit.store import open_store
from tests.conftest import Ran, run_in_process, run_storekit

DAY = 86400.0


def age(path: Path, days: float) -> None:
    """Make everything under path (and path) last changed `days` ago, children first."""
    stamp = time.time() - days * DAY
    for dirpath, _dirs, filenames in os.walk(path, topdown=False):
        for name in filenames:
            os.utime(os.path.join(dirpath, name), (stamp, stamp))
        os.utime(dirpath, (stamp, stamp))


def make(root: Path, rel: str, days: float, *, fresh_inside: str | None = None) -> Path:
    path = root / "scratch" / rel
    (path / "sub").mkdir(parents=True)
    (path / "sub" / "data.bin").write_bytes(b"x" * 1000)
    age(path, days)
    if fresh_inside:
        (path / fresh_inside).write_bytes(b"new")
        os.utime(path, (time.time() - days * DAY,) * 2)  # the top dir itself looks old
    return path


def run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Ran:
    if env and "STOREKIT_FAULTS" in env:  # a fault point kills the run: its own process
        return run_storekit(args, cwd=cwd, env=env, timeout=120)
    return run_in_process(args, cwd=cwd, env=env)


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    assert run(tmp_path, "init", "--quiet").returncode == 0
    return tmp_path / "storage"


def test_plan_deletes_only_what_expired_and_no_queued_job(storage: Path) -> None:
    make(storage, "old-run", 30)
    make(storage, "storekit-prepare-web-abc123", 20)  # an abandoned prepare work dir
    make(storage, "new-run", 1)
    make(storage, "old-but-written-today", 30, fresh_inside="sub/new.bin")
    make(storage, "4242", 30)  # Slurm job 4242 is still queued
    make(storage, "job-77_3", 30)  # an array task still queued
    make(storage, "999", 30)  # a finished job
    (storage / "scratch" / f".gone{TOMBSTONE_MARK}0123").mkdir()
    store = open_store(TierConfig(name="local", url=storage.as_uri()))
    spec = load_layout("llm-cluster")
    plan = plan_clean(spec, store, jobs=lambda: {"4242", "77", "77_3"})
    actions = {e.path.removeprefix("scratch/"): e.action for e in plan.entries}
    assert actions == {
        "old-run": "delete", "storekit-prepare-web-abc123": "delete", "new-run": "keep",
        "old-but-written-today": "keep", "4242": "keep", "job-77_3": "keep", "999": "delete",
        f".gone{TOMBSTONE_MARK}0123": "delete",
    }  # fmt: skip
    assert {e.path: e.reason for e in plan.entries}["scratch/4242"] == "Slurm job 4242 is still in the queue"
    assert plan.to_dict()["delete_bytes"] == 3 * 1000
    deleted = apply_clean(plan, store)
    assert {e.path for e in deleted} == {e.path for e in plan.entries if e.action == "delete"}
    left = sorted(p.name for p in (storage / "scratch").iterdir())
    assert left == ["4242", "job-77_3", "new-run", "old-but-written-today"]


def test_job_named_entries_stay_when_slurm_cannot_be_asked(storage: Path) -> None:
    make(storage, "4242", 30)
    make(storage, "old-run", 30)
    store = open_store(TierConfig(name="local", url=storage.as_uri()))

    def down() -> set[str]:
        raise SlurmUnreachable("slurm_load_jobs error: Unable to contact slurm controller")

    plan = plan_clean(load_layout("llm-cluster"), store, jobs=down)
    assert {e.path: e.action for e in plan.entries} == {"scratch/4242": "keep", "scratch/old-run": "delete"}
    assert plan.slurm.startswith("unreachable: slurm_load_jobs error")


def test_an_entry_written_after_planning_is_kept(storage: Path) -> None:
    old = make(storage, "old-run", 30)
    store = open_store(TierConfig(name="local", url=storage.as_uri()))
    plan = plan_clean(load_layout("llm-cluster"), store, jobs=lambda: None)
    (old / "sub" / "late.bin").write_bytes(b"written by a job that came back")
    assert apply_clean(plan, store) == [] and old.is_dir()


def test_a_full_disk_while_deleting_is_no_space_exit_6_naming_the_entry(storage: Path) -> None:
    # the one OS-error translator: ENOSPC is exit 6 here too (a copy of its own made it exit 1)
    make(storage, "old-run", 30)
    store = open_store(TierConfig(name="local", url=storage.as_uri()))
    plan = plan_clean(load_layout("llm-cluster"), store, jobs=lambda: None)

    def full() -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with faults.at("durable.tombstoned", full), pytest.raises(NoSpaceError, match="scratch/old-run"):
        apply_clean(plan, store)


def test_job_names() -> None:
    assert job_ids_in_name("123") == ["123"]
    assert job_ids_in_name("123_4") == ["123", "123_4"]
    assert job_ids_in_name("job-55.tmp") == ["55"]
    assert job_ids_in_name("run-123") == [] and job_ids_in_name("storekit-prepare-x") == []


def test_cli_dry_run_changes_nothing_then_clean_tombstones_and_a_crash_is_finished_later(
    storage: Path, tmp_path: Path
) -> None:
    make(storage, "old-a", 30)
    make(storage, "old-b", 30)
    before = sorted(p.name for p in (storage / "scratch").iterdir())
    dry = run(tmp_path, "layout", "clean", "--dry-run", "--json", env={"PATH": "/usr/bin:/bin"})
    assert dry.returncode == 0, dry.stderr
    doc = json.loads(dry.stdout)
    assert doc["dry_run"] is True and doc["delete_count"] == 2 and doc["deleted"] == []
    assert sorted(p.name for p in (storage / "scratch").iterdir()) == before
    # killed right after the first entry became a tombstone: nothing half-deleted under its name
    crash = run(tmp_path, "layout", "clean", "--quiet", env={"STOREKIT_FAULTS": "durable.tombstoned=kill"})
    assert crash.returncode == -9
    names = sorted(p.name for p in (storage / "scratch").iterdir())
    assert len(names) == 2 and "old-b" in names and TOMBSTONE_MARK in names[0]
    assert names[0].startswith(".old-a")
    done = run(tmp_path, "layout", "clean", "--json")
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(done.stdout)["deleted"]) == sorted(f"scratch/{n}" for n in names)
    assert list((storage / "scratch").iterdir()) == []
    human = run(tmp_path, "layout", "clean")
    assert "deleted 0 entries" in human.stdout


def test_work_dirs_are_judged_by_their_lease(storage: Path, tmp_path: Path) -> None:
    from storekit.pipeline.workdir import WorkDir
    from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl

    store = open_store(TierConfig(name="local", url=storage.as_uri()))
    spec = load_layout("llm-cluster")
    live = storage / "scratch" / "storekit-prepare-live"
    with WorkDir(live).leased():  # a run is using it: kept however old it looks
        age(live, 30)
        (entry,) = plan_clean(spec, store, jobs=lambda: None).entries
        assert entry.action == "keep" and entry.reason.startswith("in use: pid")
    # a run killed after its first task leaves its work dir and a lease nobody holds any more
    write_jsonl(tmp_path / "a.jsonl", sample_records(limit_bytes=40_000))
    args = ["prepare", "dataset", "-i", "a.jsonl", "--tokenizer", TOKENIZER, "--name", "a", "--quiet",
            "--task-size", "16KiB", "--workers", "1"]  # fmt: skip
    killed = run(tmp_path, *args, env={"STOREKIT_FAULTS": "prepare.task-done=kill"})
    assert killed.returncode == -9, killed.stderr
    (work,) = [p for p in (storage / "scratch").iterdir() if p.name.startswith("storekit-prepare-a-")]
    plan = plan_clean(spec, store, jobs=lambda: None)
    assert {e.path: e.action for e in plan.entries}[f"scratch/{work.name}"] == "keep"  # idle for seconds only
    age(work, 30)
    plan = plan_clean(spec, store, jobs=lambda: None)
    entry = next(e for e in plan.entries if e.path == f"scratch/{work.name}")
    assert entry.action == "delete" and entry.reason.startswith("abandoned: no run holds it")
    assert [e.path for e in apply_clean(plan, store)] == [f"scratch/{work.name}"]
    assert sorted(p.name for p in (storage / "scratch").iterdir()) == ["storekit-prepare-live"]


def test_an_interrupted_delete_beside_a_dataset_is_finished_unless_a_run_holds_its_lease(
    storage: Path,
) -> None:
    """Outside scratch/ (no TTL), clean finishes only storekit's own interrupted deletes of a
    dataset's temp siblings, and not while the dataset's lease binds: its run is deleting it."""
    folder = storage / "datasets" / "text" / "web"
    (folder / "v1").mkdir(parents=True)
    (folder / "v1" / "manifest.json").write_bytes(b"{}")
    tomb = folder / f"..v1.storekit-tmp-old-abc{TOMBSTONE_MARK}0123"
    (tomb / "sub").mkdir(parents=True)
    (tomb / "sub" / "train.bin").write_bytes(b"x" * 1000)
    (folder / ".v2.storekit-tmp-0123").mkdir()  # a staging dir, not a tombstone: left for its next run
    store = open_store(TierConfig(name="local", url=storage.as_uri()))
    spec = load_layout("llm-cluster")
    rel = f"datasets/text/web/{tomb.name}"
    with Lease(sibling_lease_path(folder / "v1"), purpose="writing the dataset web/v1"):
        plan = plan_clean(spec, store, jobs=lambda: None)
        assert {e.path: e.action for e in plan.entries} == {rel: "keep"}
        assert apply_clean(plan, store) == [] and tomb.exists()
    plan = plan_clean(spec, store, jobs=lambda: None)
    assert [(e.path, e.action, e.bytes) for e in plan.entries] == [(rel, "delete", 1000)]
    assert [e.path for e in apply_clean(plan, store)] == [rel]
    assert sorted(p.name for p in folder.iterdir()) == [".v2.storekit-tmp-0123", "v1"]
