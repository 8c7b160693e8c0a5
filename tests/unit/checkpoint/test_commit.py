"""The commit API: whole or nothing, under SIGKILL at every step, with one rank or several."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import xxhash

from storekit.checkpoint import CommitError, commit
from storekit.checkpoint.scan import COMPLETE
from storekit.layout.check import check_layout
from storekit.layout.spec import AreaSpec, LayoutSpec
from storekit.manifest import parse_manifest
from storekit.store import Store
from tests.unit.checkpoint.conftest import DAY, scan

ROOT = Path(__file__).parents[3]
SCRIPT = """
import sys
from storekit.checkpoint import commit
run, step = sys.argv[1], int(sys.argv[2])
with commit(run, step) as stage:
    for i in range(3):
        with stage.open(f"shard{i}.bin") as fh:
            fh.write(bytes([step % 251]) * (1000 + i))
    (stage.path / "extra.json").write_text('{"step": %d}' % step)
"""
POINTS = [
    "ckpt.commit.staged",
    "ckpt.commit.file-closed@2",
    "ckpt.commit.part-written",
    "ckpt.commit.hashed",
    "ckpt.commit.manifest-written",
    "ckpt.commit.renamed",
    "ckpt.commit.latest-written",
]


def run_commit(run: Path, step: int, faults: str | None = None) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("STOREKIT_FAULTS", None)
    if faults:
        env["STOREKIT_FAULTS"] = faults
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(run), str(step)], env=env, timeout=60)
    return proc.returncode


def assert_whole(step_dir: Path) -> None:
    """Every file the manifest names is there with its digest; nothing else is."""
    manifest = parse_manifest((step_dir / "manifest.json").read_bytes(), source=str(step_dir))
    on_disk = sorted(
        str(p.relative_to(step_dir)) for p in step_dir.rglob("*") if p.is_file() and p.name != "manifest.json"
    )
    assert on_disk == sorted(f.path for f in manifest.files)
    for f in manifest.files:
        data = (step_dir / f.path).read_bytes()
        assert (len(data), xxhash.xxh3_128_hexdigest(data)) == (f.size, f.xxh3_128)


def test_commit_writes_manifest_last_and_latest(run_dir: Path, local_store: Store, area: AreaSpec) -> None:
    assert run_commit(run_dir, 100) == 0
    assert sorted(p.name for p in run_dir.iterdir()) == ["latest", "step_000100"]
    assert (run_dir / "latest").read_text() == "step_000100\n"
    assert_whole(run_dir / "step_000100")
    doc = json.loads((run_dir / "step_000100/manifest.json").read_text())
    assert doc["kind"] == "checkpoint" and doc["step"] == 100 and len(doc["files"]) == 4
    (unit,) = scan(local_store, area).units
    assert (unit.writer, unit.state, unit.tracked_by, unit.has_manifest) == (
        "storekit",
        COMPLETE,
        "latest",
        True,
    )


# the crash matrix's representative in scripts/test.sh --fast; CI (slow included) kills at every point
FAST_POINT = "ckpt.commit.renamed"


@pytest.mark.parametrize(
    "point", [pytest.param(p, marks=() if p == FAST_POINT else pytest.mark.slow) for p in POINTS]
)
def test_sigkill_at_every_step_then_rerun(
    point: str, run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    assert run_commit(run_dir, 100) == 0
    assert run_commit(run_dir, 200, f"{point}=kill") == -signal.SIGKILL
    # latest names a complete step throughout; no step directory is half-filled
    latest = (run_dir / "latest").read_text().strip()
    assert latest in ("step_000100", "step_000200")
    assert_whole(run_dir / latest)
    if (run_dir / "step_000200").exists():
        assert_whole(run_dir / "step_000200")
    # what the kill left is recognised: resumable is only what `latest` allows
    result = scan(local_store, area)
    assert result.latest() is not None and result.latest().name == latest  # type: ignore[union-attr]
    leftovers = {
        f.path.rsplit("/", 1)[1]: f.rule
        for f in check_layout(spec, local_store, now=time.time() + DAY).findings
    }
    assert all(rule in ("incomplete", "incomplete-checkpoint") for rule in leftovers.values()), leftovers
    if point != "ckpt.commit.latest-written":
        assert leftovers, "the interrupted commit must leave a recognised leftover or a newer untracked step"
    # the job resumes from `latest` and commits its next step: leftovers are cleaned, the step whole
    step = 300 if latest == "step_000200" else 200
    assert run_commit(run_dir, step) == 0
    names = sorted(p.name for p in run_dir.iterdir())
    assert names == ["latest", "step_000100", "step_000200"] + (["step_000300"] if step == 300 else [])
    assert (run_dir / "latest").read_text() == f"step_{step:06d}\n"
    assert_whole(run_dir / f"step_{step:06d}")
    assert check_layout(spec, local_store, now=time.time() + DAY).findings == []


def test_exception_in_block_leaves_nothing(run_dir: Path) -> None:
    with pytest.raises(RuntimeError), commit(run_dir, 5) as stage:
        with stage.open("a.bin") as fh:
            fh.write(b"a")
        raise RuntimeError("out of memory while saving")
    assert list(run_dir.iterdir()) == []


def test_a_committed_step_is_never_overwritten(run_dir: Path) -> None:
    assert run_commit(run_dir, 100) == 0
    with pytest.raises(CommitError, match="already committed"), commit(run_dir, 100):
        pass
    assert_whole(run_dir / "step_000100")


def test_ranks_as_threads_with_a_caller_barrier(run_dir: Path) -> None:
    """Each rank hashes what it writes and leaves a partial manifest; rank 0 merges after the barrier."""
    world = 3
    barrier = threading.Barrier(world)
    errors: list[BaseException] = []

    def rank_main(rank: int) -> None:
        try:
            with (
                commit(run_dir, 7, rank=rank, world_size=world, barrier=barrier.wait) as stage,
                stage.open(f"rank{rank}/model.bin") as fh,
            ):
                for _ in range(4):
                    fh.write(bytes([rank]) * 65536)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert_whole(run_dir / "step_000007")
    doc = json.loads((run_dir / "step_000007/manifest.json").read_text())
    assert [f["path"] for f in doc["files"]] == ["rank0/model.bin", "rank1/model.bin", "rank2/model.bin"]
    assert doc["ranks"] == 3


def test_world_size_without_barrier_is_refused(run_dir: Path) -> None:
    with pytest.raises(ValueError, match="barrier"), commit(run_dir, 1, rank=0, world_size=2):
        pass


TORCH_RANK = """
import sys, torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
from storekit.checkpoint import commit
run, store_file, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=2)
with commit(run, 300) as stage:                    # rank, world and barrier from torch.distributed
    state = {"w": torch.full((128, 16), float(rank)).chunk(2)[rank].clone()}
    dcp.save(state, checkpoint_id=str(stage.path))  # a real multi-rank DCP save into the stage
    with stage.open(f"extra_rank{rank}.pt") as fh:  # and a torch.save through the hashing writer
        torch.save({"rank": rank}, fh)
dist.destroy_process_group()
"""


@pytest.mark.slow  # two processes importing torch: 5-9 s on 2 cores
def test_two_torch_distributed_ranks_commit_a_real_dcp_checkpoint(
    run_dir: Path, tmp_path: Path, local_store: Store, area: AreaSpec
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("STOREKIT_FAULTS", None)
    store_file = tmp_path / "pg-store"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TORCH_RANK, str(run_dir), str(store_file), str(r)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    step = run_dir / "step_000300"
    assert_whole(step)
    names = {f["path"] for f in json.loads((step / "manifest.json").read_text())["files"]}
    assert {".metadata", "extra_rank0.pt", "extra_rank1.pt"} <= names
    assert any(n.endswith(".distcp") for n in names)
    (unit,) = scan(local_store, area).units
    assert (unit.writer, unit.state, unit.has_manifest) == ("torch-dcp", COMPLETE, True)


def test_arguments_are_checked_before_any_byte_is_written(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    run = tmp_path / "run_001"
    bad = [
        ("100", "step"), (None, "step"), (100.0, "step"), (True, "step"), (-3, "step"),
        (np.bool_(True), "step"), (torch.tensor(True), "step"), (torch.tensor(7.0), "step"),
    ]  # fmt: skip
    for step, named in bad:
        with pytest.raises(ValueError) as err, commit(run, step) as stage:
            stage.open("never.bin").close()
        message = str(err.value)
        assert message.startswith(f"{named} must be an integer >= 0") and "\n" not in message
        assert not run.exists()  # nothing written, not even the run directory
    with (
        pytest.raises(ValueError, match=r"^hash_threads must be an integer >= 1"),
        commit(run, 1, hash_threads=0),
    ):
        pass
    with (
        pytest.raises(ValueError, match=r"^world_size must be an integer >= 1"),
        commit(run, 1, world_size=True),
    ):
        pass
    assert not run.exists()
    afile = tmp_path / "run_file"
    afile.write_bytes(b"x")
    with pytest.raises(ValueError, match=r"^run_dir .* exists and is not a directory$"), commit(afile, 1):
        pass
    with pytest.raises(ValueError, match=r"is not a directory$"), commit(afile / "deeper", 1):
        pass
    assert afile.read_bytes() == b"x"
    for step, name in ((torch.tensor(7), "step_000007"), (np.int64(8), "step_000008")):
        with commit(run, step) as stage, stage.open("w.bin") as fh:
            fh.write(b"w")
        manifest = json.loads((run / name / "manifest.json").read_text())
        assert type(manifest["step"]) is int and manifest["step"] == int(step)
    assert (run / "latest").read_text() == "step_000008\n"
