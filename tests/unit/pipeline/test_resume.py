"""A killed run (SIGKILL at several points, SIGTERM, SIGUSR1) resumes from its completion records and
produces exactly the bytes of an uninterrupted run; nothing is visible under the final name before."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from storekit import faults
from tests.conftest import run_cli, run_in_process, run_storekit
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, tree_bytes, write_jsonl

ARGS = [
    "prepare",
    "dataset",
    "-i",
    "in/a.jsonl",
    "--tokenizer",
    TOKENIZER,
    "--name",
    "res",
    "--json",
    "--quiet",
    "--workers",
    "2",
    "--shard-size",
    "32KiB",
]
FINAL = Path("storage/datasets/text/res/v1")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("resume")
    write_jsonl(root / "in" / "a.jsonl", sample_records(limit_bytes=160_000, max_doc=20_000))
    return root


@pytest.fixture(scope="module")
def baseline(corpus: Path) -> dict[str, bytes]:
    res = run_in_process([*ARGS, "--task-size", "16KiB"], cwd=corpus)
    assert res.code == 0, res.stderr
    tree = tree_bytes(corpus / FINAL)
    assert len([n for n in tree if n.endswith(".bin")]) >= 3
    _remove(corpus / "storage")
    return tree


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    "hook",
    [
        ("prepare.task-done", "1"),
        ("prepare.task-done", "5"),
        ("finalize.shard-closed", "2"),
        ("finalize.before-manifest", "1"),
    ],
)
def test_sigkill_then_rerun_is_byte_identical(
    corpus: Path, baseline: dict[str, bytes], hook: tuple[str, str]
) -> None:
    try:
        kill = {faults.ENV: f"{hook[0]}@{hook[1]}=kill"}  # SIGKILL the hook[1]-th time the point is reached
        killed = run_storekit([*ARGS, "--task-size", "16KiB"], cwd=corpus, env=kill)
        assert killed.code == -signal.SIGKILL
        assert not (corpus / FINAL).exists()  # no dataset without its manifest
        scratch = corpus / "storage" / "scratch"
        done = list(scratch.glob("storekit-prepare-*/tasks/[0-9]*"))
        if hook[0] == "prepare.task-done":
            assert len(done) >= int(hook[1])
        res = run_in_process([*ARGS, "--task-size", "16KiB"], cwd=corpus)
        assert res.code == 0, res.stderr
        assert res.json()["tasks_resumed"] == len(done)
        assert tree_bytes(corpus / FINAL) == baseline
        assert not list(scratch.glob("storekit-prepare-*"))  # the work dir is gone after success
        assert not list((corpus / FINAL).parent.glob(".*storekit-tmp-*"))
    finally:
        _remove(corpus / "storage")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signal_name", "workers"),
    # 1: the caller's thread; 2: two threads of the caller; 4: two processes of two threads
    [("term", "1"), ("usr1", "1"), ("term", "2"), ("usr1", "4")],
)
def test_preemption_signal_stops_cleanly_and_resumes(
    corpus: Path, baseline: dict[str, bytes], signal_name: str, workers: str
) -> None:
    """The signal (SIGTERM, or Slurm's SIGUSR1) arrives right after the first task's completion record,
    from a fault point in the run itself: never before the run started or after it ended."""
    try:
        faults = {"STOREKIT_FAULTS": f"prepare.task-done@1={signal_name}"}
        res = run_storekit([*ARGS, "--task-size", "16KiB", "--workers", workers], cwd=corpus, env=faults)
        assert res.code == 130, res.stderr
        assert "rerun" in res.stderr
        assert res.json()["error"]["exit_code"] == 130
        assert not (corpus / FINAL).exists()
        tasks = corpus / "storage" / "scratch"
        assert list(tasks.glob("storekit-prepare-*/tasks/[0-9]*"))  # the first task's record was kept
        assert not list(tasks.glob("storekit-prepare-*/tasks/.*storekit-tmp-*"))  # no half-written task
        res = run_in_process([*ARGS, "--task-size", "16KiB"], cwd=corpus)
        assert res.code == 0, res.stderr
        assert res.json()["tasks_resumed"] >= 1
        assert tree_bytes(corpus / FINAL) == baseline
    finally:
        _remove(corpus / "storage")


@pytest.mark.slow
def test_rerun_of_finished_dataset_is_a_noop_unless_forced(corpus: Path, baseline: dict[str, bytes]) -> None:
    try:
        assert run_in_process([*ARGS, "--task-size", "16KiB"], cwd=corpus).code == 0
        manifest = (corpus / FINAL / "manifest.json").read_bytes()
        again = run_in_process([*ARGS, "--task-size", "16KiB"], cwd=corpus)
        assert again.code == 0 and again.json()["status"] == "unchanged"
        assert (corpus / FINAL / "manifest.json").read_bytes() == manifest  # not rewritten
        forced = run_in_process([*ARGS, "--task-size", "16KiB", "--force"], cwd=corpus)
        assert forced.code == 0 and forced.json()["status"] == "prepared"
        assert tree_bytes(corpus / FINAL) == baseline
    finally:
        _remove(corpus / "storage")


def test_a_stop_signal_while_finalizing_is_reported_and_resumable(
    corpus: Path,
    baseline: dict[str, bytes],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A signal after the last task (the shards being written) is an interruption like any other:
    exit 130 with the message and the JSON error, no dataset, and the rerun finishes it."""
    import storekit.pipeline.finalize as finalize_module  # prepare imports it when it finalizes

    def stopped(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # what the SIGTERM/SIGUSR1 handlers raise

    monkeypatch.chdir(corpus)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(finalize_module, "finalize", stopped)
            res = run_cli([*ARGS, "--task-size", "16KiB"], capsys)
        assert res.code == 130, res.stderr
        assert "error: interrupted" in res.stderr and "rerun" in res.stderr
        assert res.json()["error"]["exit_code"] == 130
        assert not (corpus / FINAL).exists()
        again = run_in_process([*ARGS, "--task-size", "16KiB"], cwd=corpus)
        assert again.code == 0, again.stderr
        assert tree_bytes(corpus / FINAL) == baseline
    finally:
        _remove(corpus / "storage")


def test_a_finalize_checks_the_plan_files_bytes_not_its_own_copy(
    corpus: Path, baseline: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`jobs finalize` (and a Slurm element) compares plan.json, read again once the work dir is
    held, with the bytes it loaded: an element's in-memory plan naming its staged tokenizer copy
    still finalizes; a plan swapped (with a matching job.json) between load and lease is refused."""
    from dataclasses import replace

    from storekit.errors import MismatchError
    from storekit.pipeline.job import PrepareJob, finalize_job, load

    monkeypatch.chdir(corpus)  # the embedded default site: ./storage
    try:
        killed = run_storekit(
            [*ARGS, "--task-size", "16KiB"], cwd=corpus, env={"STOREKIT_FAULTS": "prepare.tasks-done=kill"}
        )
        assert killed.code == -signal.SIGKILL, killed.stderr
        (work,) = [
            p for p in (corpus / "storage/scratch").iterdir() if p.name.startswith("storekit-prepare-")
        ]
        job = load(work, None)
        staged = replace(job.plan, tokenizer=replace(job.plan.tokenizer, file=str(work / "tokenizer.json")))
        swapped = job.work.read_plan().replace(job.plan.plan_id.encode(), b"0" * len(job.plan.plan_id))
        header = job.work.header()
        job.work.write_plan(swapped, kind=header.kind, tasks=header.tasks, meta=header.meta)
        with pytest.raises(MismatchError, match="changed while this finalize started"):
            finalize_job(job)
        assert not (corpus / FINAL).exists()
        job.work.write_plan(job.plan_bytes, kind=header.kind, tasks=header.tasks, meta=header.meta)
        element = PrepareJob(staged, job.work, None, plan_bytes=job.plan_bytes)  # what on_node makes
        assert finalize_job(element)["status"] == "prepared"
        assert tree_bytes(corpus / FINAL) == baseline
    finally:
        _remove(corpus / "storage")
