"""Two runs, or two users, on one cluster: one commit per dataset path at a time (a lease on the
output), private work dirs whose parts are checked against their completion records, a --force
replace that never loses the old copy, and a work dir removal that a rerun finishes. Interleavings
and kills happen at named fault points (storekit.faults), never by timing."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from storekit import faults
from storekit.config import TierConfig
from storekit.layout.check import check_layout
from storekit.layout.spec import load_layout
from storekit.store import open_store
from tests.conftest import run_cli, run_storekit
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl

FINAL = Path("storage/datasets/text/cn/v1")
BASE = ["prepare", "dataset", "--tokenizer", TOKENIZER, "--name", "cn", "-i", "corpus.jsonl"]
BASE += ["--json", "--quiet", "--workers", "1", "--shard-size", "8KiB", "--task-size", "8KiB"]


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "corpus.jsonl", sample_records(limit_bytes=24_000, max_doc=4_000))
    return tmp_path


def nested_cli(args: list[str]) -> tuple[int, str]:
    """`storekit ARGS` run inside another run's fault point (same process, like a second user)."""
    ran = run_cli(args)  # no capsys: the outer run's output capture stays untouched
    return ran.code, ran.stderr


def verify(capsys: Any) -> int:
    return run_cli(["dataset", "verify", "datasets/text/cn/v1", "--json"], capsys).code


# -- item 1: one commit per dataset path --------------------------------------------------------
COMMIT_STEPS = [
    "prepare.task-written",
    "prepare.tasks-done",
    "finalize.staged",
    "commit.before-rename",
    "commit.renamed",
    "prepare.committed",
    "durable.tombstoned",
]


PLAIN, OWN_WORK_DIR, FORCE = [], ["--work-dir", "mine"], ["--force"]
BEFORE_COMMIT = COMMIT_STEPS[: COMMIT_STEPS.index("commit.renamed")]
# after the commit a different plan without --force is refused as "already holds" (exit 1)
CASES = [(s, PLAIN) for s in BEFORE_COMMIT] + [
    (s, OWN_WORK_DIR) for s in ("prepare.task-written", "commit.before-rename")
]
CASES += [(s, FORCE) for s in COMMIT_STEPS]


@pytest.mark.parametrize(("step", "extra"), CASES, ids=[f"{s}-{' '.join(e) or 'plain'}" for s, e in CASES])
def test_a_second_prepare_into_a_live_dataset_path_exits_5_and_leaves_the_first_intact(
    corpus: Path, capsys: Any, step: str, extra: list[str]
) -> None:
    """The second run has other options (another plan), its own work dir or --force; wherever the
    first one is, the second exits 5 and the first commits a dataset that verifies."""
    seen: list[tuple[int, str]] = []

    def second_run() -> None:
        if not seen:
            seen.append(nested_cli([*BASE, "--min-chars", "2", *extra]))

    with faults.at(step, second_run):
        first = run_cli(BASE, capsys)
    assert first.code == 0, first.stderr
    assert len(seen) == 1
    code, err = seen[0]
    assert code == 5, err
    assert "another storekit process is writing the dataset" in err and f"pid {os.getpid()}" in err
    assert verify(capsys) == 0
    manifest = json.loads((corpus / FINAL / "manifest.json").read_bytes())
    assert manifest["plan_id"] == first.json()["plan"]["plan_id"]
    assert not list((corpus / FINAL).parent.glob(".v1.storekit-*"))  # no lease, no staging left


def test_a_second_prepare_of_the_same_plan_exits_5_not_2(corpus: Path, capsys: Any) -> None:
    """Issue #13: the same command twice at once (same work dir) was a usage error (2)."""
    seen: list[tuple[int, str]] = []
    with faults.at("prepare.task-written", lambda: seen.append(nested_cli(BASE)) if not seen else None):
        assert run_cli(BASE, capsys).code == 0
    assert seen[0][0] == 5, seen[0][1]
    assert verify(capsys) == 0


def test_the_lease_of_a_killed_run_is_broken_by_the_next_run(corpus: Path, capsys: Any) -> None:
    killed = run_storekit(BASE, cwd=corpus, env={"STOREKIT_FAULTS": "finalize.staged=kill"})
    assert killed.code == -signal.SIGKILL
    lease = corpus / FINAL.parent / ".v1.storekit-lease"
    assert json.loads(lease.read_bytes())["pid"] > 0  # left behind by the dead process
    staging = list((corpus / FINAL.parent).glob(".v1.storekit-tmp-*"))
    assert staging
    res = run_cli(BASE, capsys)
    assert res.code == 0, res.stderr
    assert verify(capsys) == 0
    assert not lease.exists() and not any(p.exists() for p in staging)


# -- item 2: private work dirs, parts checked against their records -----------------------------
def _work_dirs(root: Path) -> list[Path]:
    return sorted((root / "storage" / "scratch").glob("storekit-prepare-cn-*"))


def test_work_dir_is_created_private(corpus: Path, capsys: Any) -> None:
    modes: list[int] = []
    with faults.at("prepare.tasks-done", lambda: modes.extend(p.stat().st_mode for p in _work_dirs(corpus))):
        assert run_cli(BASE, capsys).code == 0
    assert modes and all(m & 0o777 == 0o700 for m in modes)


def _plant(corpus: Path, capsys: Any) -> Path:
    plan = run_cli([*BASE, "--dry-run"], capsys).json()["plan"]
    work = Path(plan["work_dir"])
    work.mkdir(parents=True)
    (work / "plan.json").write_text("{}")
    return work


@pytest.mark.parametrize("how", ["other-user", "group-writable", "symlink"])
def test_a_planted_work_dir_is_refused(corpus: Path, capsys: Any, how: str) -> None:
    work = _plant(corpus, capsys)
    if how == "other-user":
        if os.geteuid() != 0:
            pytest.skip("needs root to give a directory to another user")
        os.chown(work, 65534, 65534)
        expected = "is owned by uid 65534"
    elif how == "group-writable":
        os.chmod(work, 0o777)
        expected = "writable by group or others"
    else:
        elsewhere = work.parent / "elsewhere"  # inside the tier: the store itself refuses links out
        work.rename(elsewhere)
        work.symlink_to(elsewhere)
        expected = "is not a directory"
    res = run_cli(BASE, capsys)
    assert res.code == 1, res.stderr
    assert expected in res.stderr and "refusing to use it" in res.stderr
    assert res.json()["error"]["exit_code"] == 1
    assert not (corpus / FINAL).exists()


def test_a_doctored_part_is_caught_at_finalize(corpus: Path, capsys: Any) -> None:
    def doctor() -> None:
        (task,) = [p for p in sorted((_work_dirs(corpus)[0] / "tasks").iterdir())[:1]]
        data = bytearray((task / "tokens.bin").read_bytes())
        data[0] ^= 0xFF
        (task / "tokens.bin").write_bytes(bytes(data))

    with faults.at("prepare.tasks-done", doctor):
        res = run_cli(BASE, capsys)
    assert res.code == 4, res.stderr
    assert "tokens.bin: differs from the task's completion record" in res.stderr
    assert not (corpus / FINAL).exists()


# -- item 8: the work dir goes tombstone-first; a rerun finishes a stopped removal ---------------
def test_a_kill_while_removing_the_work_dir_is_finished_by_the_next_run(corpus: Path, capsys: Any) -> None:
    killed = run_storekit(BASE, cwd=corpus, env={"STOREKIT_FAULTS": "durable.tombstoned=kill"})
    assert killed.code == -signal.SIGKILL
    assert verify(capsys) == 0  # committed before the removal started
    scratch = corpus / "storage" / "scratch"
    assert not _work_dirs(corpus)  # the name is gone in one step
    assert list(scratch.glob(".storekit-prepare-cn-*.storekit-deleting-*"))
    shutil.rmtree(corpus / FINAL)
    res = run_cli(BASE, capsys)
    assert res.code == 0, res.stderr
    assert verify(capsys) == 0
    assert not list(scratch.iterdir())


# -- item 11: --force replace keeps the old copy until the new one is committed ------------------
def _prepared_other(corpus: Path, capsys: Any) -> bytes:
    res = run_cli([*BASE, "--min-chars", "3"], capsys)
    assert res.code == 0, res.stderr
    return (corpus / FINAL / "manifest.json").read_bytes()


def test_a_stop_between_the_renames_of_a_replace_puts_the_old_copy_back(corpus: Path, capsys: Any) -> None:
    old = _prepared_other(corpus, capsys)

    def stop() -> None:
        raise KeyboardInterrupt  # what SIGTERM/SIGUSR1 raise

    def no_exchange() -> None:  # the two journaled renames, as on a file system without renameat2
        raise OSError(errno.EINVAL, "injected: no RENAME_EXCHANGE here")

    with faults.at("durable.exchange", no_exchange), faults.at("commit.old-moved", stop):
        res = run_cli([*BASE, "--force"], capsys)
    assert res.code == 130, res.stderr
    assert (corpus / FINAL / "manifest.json").read_bytes() == old
    assert verify(capsys) == 0
    assert not list((corpus / FINAL).parent.glob(".v1.storekit-*"))


NO_EXCHANGE = "durable.exchange=eio,"  # a file system without renameat2: the two journaled renames


def test_a_kill_between_the_renames_of_a_replace_is_recovered_by_the_next_run(
    corpus: Path, capsys: Any
) -> None:
    old = _prepared_other(corpus, capsys)
    killed = run_storekit(
        [*BASE, "--force"], cwd=corpus, env={"STOREKIT_FAULTS": NO_EXCHANGE + "commit.old-moved=kill"}
    )
    assert killed.code == -signal.SIGKILL
    assert not (corpus / FINAL).exists()
    (moved,) = (corpus / FINAL).parent.glob(".v1.storekit-tmp-old-*")
    assert (moved / "manifest.json").read_bytes() == old  # the journal: the old copy, whole
    again = run_cli([*BASE, "--min-chars", "5"], capsys)  # a different plan, without --force
    assert again.code == 1 and "already holds a different dataset" in again.stderr
    assert (corpus / FINAL / "manifest.json").read_bytes() == old  # put back first
    assert verify(capsys) == 0
    forced = run_cli([*BASE, "--force"], capsys)
    assert forced.code == 0, forced.stderr
    assert verify(capsys) == 0


# -- item 5: what --force may replace -------------------------------------------------------------
def test_force_never_replaces_what_is_not_a_committed_dataset_in_a_tier(corpus: Path, capsys: Any) -> None:
    model = corpus / "storage" / "models" / "llama3"
    model.mkdir(parents=True)
    (model / "weights.safetensors").write_bytes(b"w" * 64)
    for output in ("models/llama3", str(model)):
        res = run_cli([*BASE, "--output", output, "--force"], capsys)
        assert res.code == 1 and "not a storekit dataset" in res.stderr and "never replaces" in res.stderr
        assert "--force" not in res.stderr.split("hint:")[1]
    for target in ("/etc", str(corpus / "outside")):
        if target != "/etc":
            Path(target).mkdir()
            (Path(target) / "notes").write_text("x")
        res = run_cli([*BASE, "--output", target, "--force", "--dry-run"], capsys)
        assert res.code == 1 and "never replaces" in res.stderr, res.stderr
    assert (model / "weights.safetensors").read_bytes() == b"w" * 64
    # a committed dataset outside datasets/ or outside every tier is not replaced either
    assert run_cli([*BASE, "--output", str(corpus / "adhoc" / "v1")], capsys).code == 0
    res = run_cli([*BASE, "--output", str(corpus / "adhoc" / "v1"), "--min-chars", "9", "--force"], capsys)
    assert res.code == 1 and "--force replaces only a dataset below datasets/" in res.stderr
    # a corrupt manifest is not a committed dataset
    (corpus / FINAL).mkdir(parents=True)
    (corpus / FINAL / "manifest.json").write_text("{not json")
    res = run_cli([*BASE, "--force"], capsys)
    assert res.code == 1 and "unreadable manifest" in res.stderr
    assert (corpus / FINAL / "manifest.json").read_text() == "{not json"


# -- item 15: layout check during a healthy prepare ----------------------------------------------
def _check(corpus: Path) -> Any:
    store = open_store(TierConfig(name="local", url=(corpus / "storage").as_uri()))
    return check_layout(load_layout("llm-cluster"), store)


@pytest.mark.parametrize("step", ["prepare.task-written", "commit.before-rename"])
def test_layout_check_calls_a_live_runs_temp_dirs_in_progress(corpus: Path, capsys: Any, step: str) -> None:
    assert run_cli(["init", "--json"], capsys).code == 0
    reports: list[Any] = []
    with faults.at(step, lambda: reports.append(_check(corpus)) if not reports else None):
        assert run_cli(BASE, capsys).code == 0
    (report,) = reports
    assert [f for f in report.findings if f.rule == "incomplete"] == []
    assert any("storekit-tmp-" in p for p in report.in_progress), report.in_progress
    assert any(p.endswith(".storekit-lease") for p in report.in_progress)


def test_layout_check_reports_a_dead_runs_leftovers(corpus: Path, capsys: Any) -> None:
    assert run_cli(["init", "--json"], capsys).code == 0
    killed = run_storekit(BASE, cwd=corpus, env={"STOREKIT_FAULTS": "finalize.staged=kill"})
    assert killed.code == -signal.SIGKILL
    report = _check(corpus)
    incomplete = sorted(f.path for f in report.findings if f.rule == "incomplete")
    assert "datasets/text/cn/.v1.storekit-lease" in incomplete
    assert any(".v1.storekit-tmp-" in p for p in incomplete)
    assert report.in_progress == []


def test_a_run_whose_lease_was_broken_does_not_commit(corpus: Path, capsys: Any) -> None:
    """A lease can lapse (a host stalled past its expiry) and be taken over: the commit checks it."""
    lease = corpus / FINAL.parent / ".v1.storekit-lease"

    def taken_over() -> None:
        doc = json.loads(lease.read_bytes())
        lease.write_text(json.dumps({**doc, "token": "another run"}))

    with faults.at("commit.before-rename", taken_over):
        res = run_cli(BASE, capsys)
    assert res.code == 5 and "lost its lease" in res.stderr, res.stderr
    assert not (corpus / FINAL).exists()
    assert not list((corpus / FINAL).parent.glob(".v1.storekit-tmp-*"))


def test_a_planted_staging_record_does_not_make_an_output_ours(tmp_path: Path) -> None:
    """On S3 a killed finalize's shards are recognised through the work dir's record; a record in
    a work dir others can write must not make someone else's prefix look like ours (and deletable)."""
    from storekit.cli.common import site_config
    from storekit.pipeline.commit import _ours
    from storekit.pipeline.location import resolve_location
    from storekit.pipeline.workdir import WorkDir

    location = resolve_location(str(tmp_path / "out" / "v1"), site_config(None), None)
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    (work / "finalize.json").write_text(json.dumps({"output": location.display}))
    assert _ours(location, WorkDir(work))
    os.chmod(work, 0o777)
    assert not _ours(location, WorkDir(work))
