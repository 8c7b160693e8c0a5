"""scan_run: each shipped writer profile on trees shaped as that writer leaves them."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from storekit.checkpoint.actions import apply_prune, plan_prune
from storekit.checkpoint.scan import COMPLETE, IN_PROGRESS, INCOMPLETE
from storekit.layout.check import check_layout
from storekit.layout.spec import AreaSpec, LayoutSpec
from storekit.store import Store
from tests.unit.checkpoint.conftest import scan, write_tree

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def states(store: Store, area: AreaSpec, now: float | None = None) -> dict[str, tuple[str | None, str]]:
    return {u.name: (u.writer, u.state) for u in scan(store, area, now).units}


def findings(store: Store, spec: LayoutSpec) -> list[tuple[str, str, str]]:
    report = check_layout(spec, store, now=time.time() + 86400)
    return sorted((f.rule, f.path.removeprefix("checkpoints/run_001/"), f.message) for f in report.findings)


def dcp_save(path: Path, value: float) -> None:
    """A real torch.distributed.checkpoint save (single process: no process group needed)."""
    state = {"w": torch.full((64, 8), value), "step": torch.tensor(int(value))}
    dcp.save(state, checkpoint_id=str(path))


def test_torch_dcp_real_save_is_complete_and_missing_metadata_is_named(
    run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    dcp_save(run_dir / "step_100", 1.0)
    assert sorted(p.name for p in (run_dir / "step_100").iterdir())[0] == ".metadata"
    assert states(local_store, area) == {"step_100": ("torch-dcp", COMPLETE)}
    assert findings(local_store, spec) == []

    dcp_save(run_dir / "step_200", 2.0)
    (run_dir / "step_200/.metadata").rename(
        run_dir / "step_200/.metadata.tmp"
    )  # coordinator died before rename
    assert states(local_store, area)["step_200"] == ("torch-dcp", INCOMPLETE)
    assert states(local_store, area, now=time.time())["step_200"] == ("torch-dcp", IN_PROGRESS)
    assert findings(local_store, spec) == [
        ("incomplete-checkpoint", "step_200", "torch-dcp: no .metadata or __0.metadata")
    ]
    assert (
        scan(local_store, area).latest() is not None and scan(local_store, area).latest().name == "step_100"
    )  # type: ignore[union-attr]


def megatron_save(run: Path, iteration: int, *, tracker: bool = True, ranks: int = 2) -> None:
    """What megatron/training/checkpointing.py does for the legacy format: each tensor-parallel rank
    torch.saves mp_rank_TT/model_optim_rng.pt, then (after the barrier) rank 0 rewrites the tracker."""
    unit = run / f"iter_{iteration:07d}"
    for tp in range(ranks):
        target = unit / f"mp_rank_{tp:02d}/model_optim_rng.pt"
        target.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"iteration": iteration, "model": {"w": torch.ones(4, 4) * tp}}, target)
    if tracker:
        (run / "latest_checkpointed_iteration.txt").write_text(str(iteration))


def test_megatron_tracker_decides_what_is_complete(
    run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    megatron_save(run_dir, 100)
    megatron_save(run_dir, 200)
    megatron_save(run_dir, 300, tracker=False)  # killed between the files and the tracker
    result = scan(local_store, area)
    assert {u.name: u.state for u in result.units} == {
        "iter_0000100": COMPLETE,
        "iter_0000200": COMPLETE,
        "iter_0000300": INCOMPLETE,
    }
    assert result.latest() is not None and result.latest().name == "iter_0000200"  # type: ignore[union-attr]
    assert result.pointers == {"checkpoints/run_001/latest_checkpointed_iteration.txt": "iter_0000200"}
    ((rule, path, message),) = findings(local_store, spec)
    assert (rule, path) == ("incomplete-checkpoint", "iter_0000300")
    assert "latest_checkpointed_iteration.txt names iter_0000200" in message


def test_megatron_tracker_naming_a_missing_iteration_is_a_bad_pointer(
    run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    megatron_save(run_dir, 100)
    (run_dir / "latest_checkpointed_iteration.txt").write_text("400")
    assert findings(local_store, spec) == [
        (
            "bad-pointer",
            "latest_checkpointed_iteration.txt",
            "names step 400, which does not exist in checkpoints/run_001",
        )
    ]


def test_megatron_torch_dist_needs_metadata_json_written_last(
    run_dir: Path, local_store: Store, area: AreaSpec
) -> None:
    dcp_save(run_dir / "iter_0000100", 1.0)  # the sharded part of a torch_dist save is a DCP save
    (run_dir / "latest_checkpointed_iteration.txt").write_text("100")
    assert states(local_store, area) == {"iter_0000100": ("megatron", INCOMPLETE)}
    (run_dir / "iter_0000100/metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    assert states(local_store, area) == {"iter_0000100": ("megatron", COMPLETE)}


def ds_model_states() -> bytes:
    """mp_rank_00_model_states.pt as DeepSpeed 0.19.8 wrote it (1 rank; tests/fixtures recording)."""
    doc = json.loads((Path(__file__).parents[2] / "fixtures/checkpoints/deepspeed.json").read_text())
    return base64.b64decode(doc["tree"]["global_step1/mp_rank_00_model_states.pt"]["b64"])


def test_deepspeed_latest_and_extras(
    run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    write_tree(
        run_dir,
        {
            "global_step10/mp_rank_00_model_states.pt": ds_model_states(),
            "global_step10/zero_pp_rank_0_mp_rank_00_optim_states.pt": b"o",
            "global_step20/mp_rank_00_model_states.pt": ds_model_states(),
            "global_step20/zero_pp_rank_0_mp_rank_00_optim_states.pt": b"o",
            "global_step30/zero_pp_rank_0_mp_rank_00_optim_states.pt": b"o",  # model states never came
            "latest": b"global_step20",
            "zero_to_fp32.py": b"#!/usr/bin/env python\n",
        },
    )
    assert states(local_store, area) == {
        "global_step10": ("deepspeed", COMPLETE),
        "global_step20": ("deepspeed", COMPLETE),
        "global_step30": ("deepspeed", INCOMPLETE),
    }
    assert findings(local_store, spec) == [
        ("incomplete-checkpoint", "global_step30", "deepspeed: no *model_states.pt")
    ]


def test_nemo_unfinished_marker(run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec) -> None:
    name = "megatron_gpt--val_loss=2.10-step=99-consumed_samples=800.0"
    write_tree(
        run_dir,
        {
            f"{name}/weights/metadata.json": b"{}",
            f"{name}/weights/.metadata": b"m",
            f"{name}/context/model.yaml": b"x",
            f"{name}-last/weights/metadata.json": b"{}",
        },
    )
    assert states(local_store, area) == {name: ("nemo", COMPLETE), f"{name}-last": ("nemo", COMPLETE)}
    (run_dir / f"{name}-unfinished").touch()
    assert states(local_store, area)[name] == ("nemo", INCOMPLETE)
    assert findings(local_store, spec) == [
        ("incomplete-checkpoint", name, f"nemo: marker {name}-unfinished present")
    ]


def test_orbax_tmp_dir_and_commit_file(
    run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    write_tree(
        run_dir,
        {
            "100/_CHECKPOINT_METADATA": b"{}",
            "100/default/_METADATA": b"{}",
            "200.orbax-checkpoint-tmp-1711/_CHECKPOINT_METADATA": b"{}",
        },
    )
    result = scan(local_store, area)
    assert {u.name: (u.writer, u.state, u.is_temp) for u in result.units} == {
        "100": ("orbax", COMPLETE, False),
        "200.orbax-checkpoint-tmp-1711": ("orbax", INCOMPLETE, True),
    }
    assert [(r, p) for r, p, _ in findings(local_store, spec)] == [
        ("incomplete", "200.orbax-checkpoint-tmp-1711")
    ]


def test_hf_trainer_state_json_commits(
    run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    write_tree(
        run_dir,
        {
            "checkpoint-500/model.safetensors": b"w",
            "checkpoint-500/optimizer.pt": b"o",
            "checkpoint-500/trainer_state.json": b"{}",
            "checkpoint-1000/model.safetensors": b"w",
            "checkpoint-1000/optimizer.pt": b"o",
            "config.json": b"{}",
            "runs/events.out": b"e",
        },
    )
    assert states(local_store, area) == {
        "checkpoint-500": ("hf-trainer", COMPLETE),
        "checkpoint-1000": ("hf-trainer", INCOMPLETE),
    }
    assert findings(local_store, spec) == [
        ("incomplete-checkpoint", "checkpoint-1000", "hf-trainer: no trainer_state.json")
    ]


def test_two_writers_markers_in_one_unit(
    run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    write_tree(run_dir, {"step_000100/.metadata": b"m", "step_000100/_CHECKPOINT_METADATA": b"{}"})
    assert states(local_store, area) == {"step_000100": (None, INCOMPLETE)}
    assert (
        "ambiguous-checkpoint",
        "step_000100",
        "carries the commit markers of torch-dcp and orbax",
    ) in findings(local_store, spec)


@pytest.mark.parametrize("content", ["../run_002/step_000100", "/etc", "step_000100/../../x"])
def test_latest_pointer_leaving_the_run(
    run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec, content: str
) -> None:
    write_tree(run_dir, {"step_000100/manifest.json": b"{}", "latest": content.encode()})
    ((rule, path, message),) = findings(local_store, spec)
    assert (rule, path) == ("bad-pointer", "latest") and "names a unit of its run only" in message


def test_dangling_latest_pointer(run_dir: Path, local_store: Store, spec: LayoutSpec) -> None:
    write_tree(run_dir, {"step_000100/manifest.json": b"{}", "latest": b"step_000200\n"})
    assert findings(local_store, spec) == [
        ("bad-pointer", "latest", "names step_000200, which does not exist in checkpoints/run_001")
    ]


def test_unknown_entries_are_still_reported(run_dir: Path, local_store: Store, spec: LayoutSpec) -> None:
    write_tree(run_dir, {"notes.txt": b"hi", "final weights/x": b"w", "model.archived.storekit-stub": b"{}"})
    assert [(r, p) for r, p, _ in findings(local_store, spec)] == [
        ("bad-stub", "model.archived.storekit-stub"),  # a stub is read: `{}` is not one
        ("misnamed", "final weights"),
        ("unexpected-file", "notes.txt"),
    ]


DCP_RANKS = """
import sys, torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
run, store_file, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=2)
own = {"w": torch.full((16, 4), float(rank + 1))}  # each rank its own values: no coordination
dcp.save(own, checkpoint_id=f"{run}/step_100", use_collectives=False)  # __0.metadata, __1.metadata
replicated = {"w": torch.full((16, 4), 7.0)}
dcp.save(replicated, checkpoint_id=f"{run}/500")  # a bare-number step directory, with collectives
for where, state in (("step_100", own), ("500", replicated)):  # dcp.load: both load on every rank
    back = {"w": torch.zeros(16, 4)}
    dcp.load(back, checkpoint_id=f"{run}/{where}")
    assert torch.equal(back["w"], state["w"]), where
dist.destroy_process_group()
"""


@pytest.mark.slow  # two torch processes with a gloo group: ~10-30 s on a busy 2-core machine
def test_torch_dcp_without_collectives_and_in_a_bare_number_dir(
    run_dir: Path, tmp_path: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", DCP_RANKS, str(run_dir), str(tmp_path / "pg"), str(r)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    names = sorted(p.name for p in (run_dir / "step_100").iterdir())
    assert "__0.metadata" in names and "__1.metadata" in names and ".metadata" not in names
    assert states(local_store, area) == {"step_100": ("torch-dcp", COMPLETE), "500": ("torch-dcp", COMPLETE)}
    assert findings(local_store, spec) == []
    (run_dir / "step_100/__1.metadata").unlink()  # rank 1 never finished its save
    (run_dir / "500/.metadata").unlink()
    result = scan(local_store, area)
    assert {u.name: (u.writer, u.state) for u in result.units} == {
        "step_100": ("torch-dcp", INCOMPLETE),
        "500": ("torch-dcp", INCOMPLETE),
    }
    assert "no __1.metadata: rank 1 did not finish" in result.unit("step_100").reason  # type: ignore[union-attr]
    assert result.unit("500").reason == "torch-dcp: no .metadata or __0.metadata"  # type: ignore[union-attr]


def test_nemo_ckpt_files_and_their_unfinished_marker(
    run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    """NeMo's format_checkpoint_unfinished_marker_path (nemo/lightning/pytorch/callbacks/
    model_checkpoint.py, NeMo 2.6.0rc0): the path minus ".ckpt", minus "-EMA", plus "-unfinished"."""
    old = "megatron_gpt--val_loss=2.30-step=100-consumed_samples=800.0"
    new = "megatron_gpt--val_loss=2.10-step=200-consumed_samples=1600.0"
    write_tree(
        run_dir,
        {
            f"{old}.ckpt": b"c" * 10,
            f"{new}.ckpt": b"c" * 10,
            f"{new}-EMA.ckpt": b"e" * 10,
            f"{new}-unfinished": b"",  # touched before the save, removed after every rank's barrier
            "model--step=50.ckpt": b"m",
            "epoch=0-step=30.ckpt": b"l",  # Lightning's default file name
        },
    )
    result = scan(local_store, area)
    assert {u.name: (u.writer, u.state, u.step) for u in result.units} == {
        "epoch=0-step=30.ckpt": ("nemo", COMPLETE, 30),
        "model--step=50.ckpt": ("nemo", COMPLETE, 50),
        f"{old}.ckpt": ("nemo", COMPLETE, 100),
        f"{new}.ckpt": ("nemo", INCOMPLETE, 200),
        f"{new}-EMA.ckpt": ("nemo", INCOMPLETE, 200),
    }
    assert result.latest() is not None and result.latest().name == f"{old}.ckpt"  # type: ignore[union-attr]
    assert findings(local_store, spec) == [
        ("incomplete-checkpoint", f"{new}-EMA.ckpt", f"nemo: marker {new}-unfinished present"),
        ("incomplete-checkpoint", f"{new}.ckpt", f"nemo: marker {new}-unfinished present"),
    ]
    actions = plan_prune(result, keep_last=1, incomplete_older_than=0.0, now=time.time() + 86400)
    apply_prune(local_store, result, actions)
    assert sorted(p.name for p in run_dir.iterdir()) == [f"{old}.ckpt"]  # marker gone with its units


def test_a_units_record_being_written_is_no_unit(
    run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    """A drain's commit stages the unit's archive manifest (a write temp of
    `<unit>.storekit-archive.json`) before it renames the unit in: another node listing the run then
    sees one complete unit, not a second one in progress."""
    staged = ".step_000100.storekit-archive.json.storekit-tmp-commit"
    write_tree(run_dir, {"step_000100/manifest.json": b"{}", staged: b"{}"})
    assert findings(local_store, spec) == []
    assert [(u.name, u.is_temp) for u in scan(local_store, area, time.time()).units] == [
        ("step_000100", False)
    ]
