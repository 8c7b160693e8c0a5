"""What a policy selects and what it may free: the newest, tracked, recent, pinned and unfinished
checkpoints are never freed (the last two never moved at all), whatever the rule says."""

from __future__ import annotations

import time
from pathlib import Path

from storekit.checkpoint import commit
from storekit.layout.spec import load_layout
from storekit.policies import Policy, adhoc_policy
from storekit.store import open_store
from storekit.tier.candidates import Candidate, discover
from storekit.tier.plan import PlanRequest, build_plan
from storekit.tier.select import Usage, select
from tests.unit.tier.conftest import DAY, aged, dcp_unit, make_site


def megatron_unit(run: Path, iteration: int, age: float) -> None:
    unit = run / f"iter_{iteration:07d}" / "mp_rank_00"
    unit.mkdir(parents=True)
    (unit / "model_optim_rng.pt").write_bytes(b"w" * 64)
    aged(unit.parent, age)


def build_runs(lustre: Path) -> None:
    ck = lustre / "checkpoints"
    run1 = ck / "run_001"
    for step in (100, 200, 300, 400):
        dcp_unit(run1, f"step_{step:06d}")
    dcp_unit(run1, "step_000500", complete=False)  # its writer died: incomplete
    dcp_unit(run1, "step_000600", complete=False, age=30)  # being written now: in progress
    run2 = ck / "run_002"
    megatron_unit(run2, 100, 5 * DAY)
    megatron_unit(run2, 200, 5 * DAY)
    (run2 / "latest_checkpointed_iteration.txt").write_text("100")  # 200 was never recorded
    aged(run2 / "latest_checkpointed_iteration.txt", 5 * DAY)
    run4 = ck / "run_004"
    dcp_unit(run4, "step_000010", age=60)  # complete, but written a minute ago
    dcp_unit(run4, "step_000020")


def test_never_freed_and_never_moved(tmp_path: Path) -> None:
    pin = ("checkpoints/run_001/step_000200",)
    site = make_site(tmp_path, f'[policies.all]\naction = "archive"\npinned = ["{pin[0]}"]\n')
    build_runs(tmp_path / "lustre")
    plan = build_plan(site, PlanRequest(site.policies["all"]))
    freed = {u.src_path.removeprefix("checkpoints/"): u.free_source for u in plan.units}
    keep = {u.src_path.removeprefix("checkpoints/"): u.keep_reason for u in plan.units if not u.free_source}
    assert freed == {
        "run_001/step_000100": True,
        "run_001/step_000200": False,  # pinned
        "run_001/step_000300": True,
        "run_001/step_000400": False,  # newest complete
        "run_002/iter_0000100": False,  # newest complete, named by the tracker
        "run_004/step_000010": False,  # within the quiet period
        "run_004/step_000020": False,  # newest complete
    }
    assert "pinned (checkpoints/run_001/step_000200)" in str(keep["run_001/step_000200"])
    assert "newest complete" in str(keep["run_001/step_000400"])
    assert "quiet period" in str(keep["run_004/step_000010"])
    passed = {str(p["path"]).removeprefix("checkpoints/"): str(p["reason"]) for p in plan.passed}
    assert passed["run_001/step_000500"].startswith("incomplete: never moved as if whole")
    assert passed["run_001/step_000600"].startswith("in-progress: never moved as if whole")
    assert passed["run_002/iter_0000200"].startswith("incomplete: never moved as if whole")
    # a purge never even selects what must stay
    purge = build_plan(site, PlanRequest(Policy(name="p", source="t", action="purge", pinned=pin)))
    assert {u.src_path.removeprefix("checkpoints/") for u in purge.units} == {
        "run_001/step_000100",
        "run_001/step_000300",
    }
    assert all(u.free_source for u in purge.units)
    tail = "freed only if its copy on vault is verified (read back right before)"
    assert all(u.reason.endswith(tail) for u in purge.units)


def test_a_pointer_moved_back_keeps_what_it_names(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    run = tmp_path / "lustre/checkpoints/run_003"
    for step in (1, 2, 3):
        with commit(run, step) as stage, stage.open("model.bin") as fh:
            fh.write(bytes([step]) * 100)
    (run / "latest").write_text("step_000002")  # a resumed job pointed it back
    aged(run, 5 * DAY)
    plan = build_plan(site, PlanRequest(adhoc_policy("archive", paths=("checkpoints/run_003",))))
    by = {u.src_path.rsplit("/", 1)[1]: u for u in plan.units}
    assert by["step_000001"].free_source
    # what latest names is the newest complete one: the later step was never recorded
    assert not by["step_000002"].free_source
    assert by["step_000002"].keep_reason == "copied, never freed: the newest complete checkpoint of its run"
    assert "step_000003" not in by  # later than what latest names: never recorded, so never moved


def candidates(tmp_path: Path) -> list[Candidate]:
    site = make_site(tmp_path)
    run = tmp_path / "lustre/checkpoints/run_001"
    for i, step in enumerate((1000, 1500, 2000, 2500, 3000)):
        dcp_unit(run, f"step_{step:06d}", age=(10 - i) * DAY, size=1000 * (i + 1))
    store = open_store(site.tier("lustre"))
    spec = load_layout("llm-cluster")
    area = spec.area("checkpoints")
    assert area is not None
    return discover(store, spec, area, now=time.time())


def chosen(policy: Policy, units: list[Candidate], usage: Usage | None = None) -> list[str]:
    sel = select(policy, units, now=time.time(), usage=usage)
    return [c.unit.name for c in sel.chosen]


def test_age_size_keep_and_run_state_conditions(tmp_path: Path) -> None:
    units = candidates(tmp_path)
    p = Policy(name="p", source="t", action="archive")
    assert chosen(p, units) == ["step_001000", "step_001500", "step_002000", "step_002500", "step_003000"]
    older = Policy(name="p", source="t", action="archive", older_than_s=7.5 * DAY)
    assert chosen(older, units) == ["step_001000", "step_001500", "step_002000"]
    assert chosen(Policy(name="p", source="t", action="archive", keep_last=2), units) == [
        "step_001000", "step_001500", "step_002000"
    ]  # fmt: skip
    assert chosen(Policy(name="p", source="t", action="archive", keep_every=1000), units) == [
        "step_001500", "step_002500"
    ]  # fmt: skip
    big = Policy(name="p", source="t", action="archive", larger_than=4000, smaller_than=9000)
    # units hold 2,004 / 4,004 / 6,004 / 8,004 / 10,004 bytes
    assert chosen(big, units) == ["step_001500", "step_002000", "step_002500"]
    # the run last wrote 6 days ago: idle for 5d, not for 7d
    assert len(chosen(Policy(name="p", source="t", action="archive", idle_for_s=5 * DAY), units)) == 5
    assert chosen(Policy(name="p", source="t", action="archive", idle_for_s=7 * DAY), units) == []


def test_watermarks_select_the_oldest_down_to_the_low_mark(tmp_path: Path) -> None:
    units = candidates(tmp_path)  # freeable: all but the newest (step_003000)
    p = Policy(name="p", source="t", action="drain", high_watermark=0.8, low_watermark=0.5)
    assert chosen(p, units, Usage(used=70_000, total=100_000)) == []  # below the high mark
    sel = select(p, units, now=time.time(), usage=Usage(used=53_000, total=100_000))
    assert sel.chosen == [] and sel.note is not None and "below the high watermark" in sel.note
    # 90% of 10,000 used: free oldest first until ≤ 5,000 is used
    names = chosen(p, units, Usage(used=9_000, total=10_000))
    assert names == ["step_001000", "step_001500"]  # 9,000 - 2,004 - 4,004 = 2,992 ≤ 5,000
    assert chosen(p, units, None) == []  # free space unknown: nothing, with the reason
