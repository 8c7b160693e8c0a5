"""Trees recorded from the real writers (tests/fixtures/record_checkpoints.py) judged as they would be."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from storekit.checkpoint.actions import apply_prune, plan_prune
from storekit.checkpoint.scan import COMPLETE, INCOMPLETE
from storekit.layout.check import check_layout
from storekit.layout.spec import AreaSpec, LayoutSpec
from storekit.store import Store
from tests.unit.checkpoint.conftest import DAY, scan

FIXTURES = Path(__file__).parents[2] / "fixtures/checkpoints"
# recording -> (writer profile, the units it left, the marker whose absence makes the newest incomplete)
EXPECTED = {
    "hf-trainer": ("hf-trainer", ["checkpoint-2", "checkpoint-4"], "trainer_state.json"),
    "hf-trainer-best": ("hf-trainer", ["checkpoint-2", "checkpoint-4", "checkpoint-6"], "trainer_state.json"),
    "deepspeed": ("deepspeed", ["global_step1", "global_step2"], "mp_rank_00_model_states.pt"),
    "deepspeed-zero1-2ranks": (
        "deepspeed",
        ["global_step1", "global_step2", "global_step3"],
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ),
    "orbax": ("orbax", ["10", "20"], "_CHECKPOINT_METADATA"),
    "megatron-torch-dist": ("megatron", ["iter_0000100", "iter_0000200"], "metadata.json"),
}


def materialize(run: Path, recording: dict[str, Any]) -> None:
    for rel, entry in recording["tree"].items():
        path = run / rel
        if rel.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        text, raw = entry.get("text"), entry.get("b64")
        if raw is not None:  # recorded byte for byte: storekit reads it (DeepSpeed's dp_world_size)
            path.write_bytes(base64.b64decode(raw))
        else:
            path.write_bytes(text.encode() if text is not None else b"\0" * int(entry["size"]))


def load(name: str) -> dict[str, Any]:
    path = FIXTURES / f"{name}.json"
    if not path.exists():
        pytest.fail(f"{path} missing: run tests/fixtures/record_checkpoints.py {name}")
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_tree_is_complete_and_clean(
    name: str, run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    writer, units, _ = EXPECTED[name]
    materialize(run_dir, load(name))
    result = scan(local_store, area)
    assert [(u.name, u.writer, u.state) for u in result.units] == [(n, writer, COMPLETE) for n in units]
    assert result.latest() is not None and result.latest().name == units[-1]  # type: ignore[union-attr]
    assert check_layout(spec, local_store, now=time.time() + DAY).findings == []


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_tree_without_its_marker_is_incomplete(
    name: str, run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    writer, units, marker = EXPECTED[name]
    materialize(run_dir, load(name))
    (run_dir / units[-1] / marker).unlink()
    result = scan(local_store, area)
    newest = result.unit(units[-1])
    assert newest is not None and (newest.writer, newest.state) == (writer, INCOMPLETE)
    assert marker in newest.reason or "model_states" in newest.reason, newest.reason
    assert result.latest() is not None and result.latest().name == units[-2]  # type: ignore[union-attr]
    rules = {
        f.path.rsplit("/", 1)[1]: f.rule
        for f in check_layout(spec, local_store, now=time.time() + DAY).findings
    }
    assert rules[units[-1]] == "incomplete-checkpoint"


def test_deepspeed_rank_killed_mid_save_is_not_latest(
    run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    """DeepSpeed 0.19.8, 2 ranks, ZeRO-1: rank 1 SIGKILLed inside its third save_checkpoint before its
    ZeRO shard; rank 0 still wrote `latest` = global_step3 (recorded by record_checkpoints.py, with
    what load_checkpoint then made of each tag on each rank)."""
    recording = load("deepspeed-rank-killed")
    materialize(run_dir, recording)
    assert (run_dir / "latest").read_text() == "global_step3"
    assert not (run_dir / "global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt").exists()
    result = scan(local_store, area)
    step3 = result.unit("global_step3")
    assert step3 is not None and (step3.writer, step3.state) == ("deepspeed", INCOMPLETE)
    assert "dp_world_size=2" in step3.reason
    assert "zero_pp_rank_1_mp_rank_00_optim_states.pt" in step3.reason
    assert [u.name for u in result.complete()] == ["global_step1", "global_step2"]
    # DeepSpeed's own load_checkpoint in a fresh 2-rank job (recorded): complete = loads on every rank
    loads = recording["loads"]
    assert loads["global_step3"] == ["loaded", "FileNotFoundError"]  # rank 1's shard is missing
    assert [u.name for u in result.complete()] == sorted(
        tag for tag, verdicts in loads.items() if tag != "latest" and set(verdicts) == {"loaded"}
    )
    assert set(loads["latest"]) != {"loaded"}  # a load without a tag follows `latest` and fails
    assert result.latest() is not None and result.latest().name == "global_step2"  # type: ignore[union-attr]
    found = {
        (f.rule, f.path.rsplit("/", 1)[1])
        for f in check_layout(spec, local_store, now=time.time() + DAY).findings
    }
    assert found == {("bad-pointer", "latest"), ("incomplete-checkpoint", "global_step3")}


def test_deepspeed_shard_count_reads_the_recorded_world_size(
    run_dir: Path, local_store: Store, area: AreaSpec
) -> None:
    """The count comes from mp_rank_00_model_states.pt: a damaged one is not complete either."""
    materialize(run_dir, load("deepspeed-zero1-2ranks"))
    model = run_dir / "global_step3/mp_rank_00_model_states.pt"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])  # cut short, as a killed torch.save
    step3 = scan(local_store, area).unit("global_step3")
    assert step3 is not None and step3.state == INCOMPLETE
    assert "cannot be read as a torch checkpoint" in step3.reason


@pytest.mark.parametrize(
    ("cut", "says"), [("half", "is cut short"), ("empty", "is empty"), ("fifo", "is not a regular file")]
)
def test_deepspeed_shard_cut_short_by_a_kill_inside_torch_save(
    cut: str, says: str, run_dir: Path, local_store: Store, area: AreaSpec, spec: LayoutSpec
) -> None:
    """DeepSpeed's ranks torch.save their shards under the final name: rank 1 killed inside that
    save leaves its shard cut short (here: the bytes of a real torch.save, cut), never loadable,
    while rank 0's `latest` names the step. It is incomplete, not latest, and prune keeps the
    step before it. A FIFO in a shard's place is refused, never opened for reading."""
    torch = pytest.importorskip("torch")
    materialize(run_dir, load("deepspeed-zero1-2ranks"))
    shard = run_dir / "global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt"
    torch.save({"optimizer_state_dict": {"state": torch.arange(4096.0)}, "ds_version": "0.19.8"}, shard)
    whole = shard.read_bytes()
    if cut == "fifo":
        shard.unlink()
        os.mkfifo(shard)
    else:
        shard.write_bytes(whole[: len(whole) // 2] if cut == "half" else b"")
        with pytest.raises((RuntimeError, EOFError, OSError)):  # what DeepSpeed's load_checkpoint meets
            torch.load(shard, weights_only=False)
    result = scan(local_store, area)
    step3 = result.unit("global_step3")
    assert step3 is not None and (step3.writer, step3.state) == ("deepspeed", INCOMPLETE)
    assert step3.reason.startswith(f"deepspeed: zero_pp_rank_1_mp_rank_00_optim_states.pt {says}")
    assert result.latest() is not None and result.latest().name == "global_step2"  # type: ignore[union-attr]
    found = check_layout(spec, local_store, now=time.time() + DAY).findings
    assert {(f.rule, f.path.rsplit("/", 1)[1]) for f in found} >= {
        ("bad-pointer", "latest"),
        ("incomplete-checkpoint", "global_step3"),
    }
    keep = {a.unit.name for a in plan_prune(result, keep_last=1) if not a.delete}
    assert keep == {"global_step2", "global_step3"}  # the loadable step, and what `latest` names
    shard.unlink()
    shard.write_bytes(whole)  # the save finished: whole again
    assert scan(local_store, area).latest().name == "global_step3"  # type: ignore[union-attr]


def test_deepspeed_shard_behind_a_link_is_followed_inside_the_tier_only(
    run_dir: Path, tmp_path: Path, local_store: Store, area: AreaSpec
) -> None:
    torch = pytest.importorskip("torch")
    materialize(run_dir, load("deepspeed-zero1-2ranks"))
    shard = run_dir / "global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt"
    shard.unlink()
    inside = run_dir.parent / "shard.pt"  # a whole torch.save file inside the tier
    torch.save({"state": torch.arange(64.0)}, inside)
    shard.symlink_to(inside)
    assert scan(local_store, area).latest().name == "global_step3"  # type: ignore[union-attr]
    outside = tmp_path / "outside.pt"
    outside.write_bytes(inside.read_bytes())
    shard.unlink()
    shard.symlink_to(outside)
    step3 = scan(local_store, area).unit("global_step3")
    assert step3 is not None and step3.state == INCOMPLETE and "outside the root" in step3.reason


def test_prune_keeps_the_trainers_best_model(run_dir: Path, local_store: Store, area: AreaSpec) -> None:
    """transformers 5.23 with load_best_model_at_end: best_model_checkpoint (checkpoint-2, recorded)
    is what rotate_checkpoints never deletes; `prune --keep-last 1` keeps it as well."""
    materialize(run_dir, load("hf-trainer-best"))
    state = json.loads((run_dir / "checkpoint-6/trainer_state.json").read_text())
    assert state["best_model_checkpoint"].endswith("/checkpoint-2")
    result = scan(local_store, area)
    actions = {a.unit.name: a for a in plan_prune(result, keep_last=1)}
    assert {name: a.delete for name, a in actions.items()} == {
        "checkpoint-2": False,
        "checkpoint-4": True,
        "checkpoint-6": False,
    }
    assert "best_model_checkpoint in checkpoint-6/trainer_state.json" in actions["checkpoint-2"].reason
    apply_prune(local_store, result, list(actions.values()))
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith("checkpoint-")) == [
        "checkpoint-2",
        "checkpoint-6",
    ]
