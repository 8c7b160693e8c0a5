"""storekit ckpt list|latest|verify|adopt|prune through the real CLI: exit codes, --json, kills."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from storekit.checkpoint import commit
from tests.conftest import Ran, run_in_process, run_storekit

RUN = "storage/checkpoints/run_001"


def ck(cwd: Path, *args: str, faults: str | None = None) -> Ran:
    if not faults:
        return run_in_process(args, cwd=cwd, env={"COLUMNS": "80"})
    # a fault point kills the run: its own process
    return run_storekit(args, cwd=cwd, env={"COLUMNS": "80", "STOREKIT_FAULTS": faults}, timeout=120)


def doc(proc: Ran) -> Any:
    return json.loads(proc.stdout)


def old(path: Path, days: float = 1.0) -> None:
    when = time.time() - days * 86400
    for dirpath, _, files in os.walk(path):
        for f in files:
            os.utime(os.path.join(dirpath, f), (when, when))
        os.utime(dirpath, (when, when))


@pytest.fixture
def cwd(tmp_path: Path, sk: Any) -> Path:
    assert sk(tmp_path, "init", "--quiet").returncode == 0
    for step in (100, 200, 300, 400):
        with commit(tmp_path / RUN, step) as stage, stage.open("model.bin") as fh:
            fh.write(bytes([step % 7]) * (step * 10))
    return tmp_path


def test_list_and_latest(cwd: Path, sk: Any) -> None:
    (cwd / RUN / "step_000500").mkdir()  # being written right now
    listed = sk(cwd, "ckpt", "list", "run_001", "--json")
    assert listed.returncode == 0, listed.stderr
    units = {u["name"]: u for u in doc(listed)["units"]}
    assert [u["state"] for u in units.values()] == ["complete"] * 4 + ["in-progress"]
    assert units["step_000400"]["tracked_by"] == "latest" and units["step_000100"]["bytes"] > 1000
    assert units["step_000100"]["location"] == str(cwd / RUN / "step_000100")
    latest = sk(cwd, "ckpt", "latest", "run_001")
    assert (latest.returncode, latest.stdout) == (0, f"{cwd / RUN / 'step_000400'}\n")
    assert sk(cwd, "ckpt", "latest", "checkpoints/run_001").stdout == latest.stdout
    assert sk(cwd, "ckpt", "latest", str(cwd / RUN)).stdout == latest.stdout
    human = sk(cwd, "ckpt", "list", "run_001")
    assert "step_000500" in human.stdout and "in-progress" in human.stdout
    # a pipe gets whole lines (no folding): only storekit's own columns are held to a width, not the
    # length of the temp dir's path
    assert max(len(line.replace(str(cwd), "<cwd>")) for line in human.stdout.splitlines()) <= 110


def test_latest_exit_codes(cwd: Path, sk: Any) -> None:
    missing = sk(cwd, "ckpt", "latest", "run_009", "--json")
    assert missing.returncode == 3 and "no such run" in doc(missing)["error"]["message"]
    (cwd / "storage/checkpoints/run_002").mkdir()
    none = sk(cwd, "ckpt", "latest", "run_002")
    assert none.returncode == 3 and none.stdout == "" and "no complete checkpoint" in none.stderr


def test_verify_names_the_file_that_differs(cwd: Path, sk: Any) -> None:
    ok = sk(cwd, "ckpt", "verify", "run_001", "--json")
    assert ok.returncode == 0 and doc(ok)["ok"] is True and len(doc(ok)["results"]) == 4
    target = cwd / RUN / "step_000200/model.bin"
    data = bytearray(target.read_bytes())
    data[7] ^= 1
    target.write_bytes(bytes(data))
    bad = sk(cwd, "ckpt", "verify", "run_001/step_000200")
    assert bad.returncode == 4
    assert "model.bin: xxh3-128" in bad.stdout
    assert sk(cwd, "ckpt", "verify", "run_001/step_000100").returncode == 0
    nothing = sk(cwd, "ckpt", "verify", "run_001/step_000999", "--json")
    assert nothing.returncode == 3 and "not a checkpoint" in doc(nothing)["error"]["message"]


def test_adopt_a_foreign_checkpoint_then_verify(cwd: Path, sk: Any) -> None:
    unit = cwd / RUN / "checkpoint-50"
    unit.mkdir()
    (unit / "model.safetensors").write_bytes(b"w" * 999)
    (unit / "trainer_state.json").write_text("{}")
    os.chmod(unit / "model.safetensors", 0o640)
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in unit.iterdir()}
    rule_only = sk(cwd, "ckpt", "verify", "run_001/checkpoint-50", "--json")
    result = doc(rule_only)["results"][0]
    assert rule_only.returncode == 0 and result["digest"] is False and "no digest exists" in result["note"]
    dry = sk(cwd, "ckpt", "adopt", "run_001/checkpoint-50", "--dry-run", "--json")
    assert dry.returncode == 0 and doc(dry)["files"] == 2 and not (unit / "manifest.json").exists()
    done = sk(cwd, "ckpt", "adopt", "run_001/checkpoint-50")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((unit / "manifest.json").read_text())
    assert manifest["writer"] == "hf-trainer" and manifest["adopted"] is True
    assert {m["path"]: m["mode"] for m in manifest["file_meta"]}["model.safetensors"] == "0640"
    assert {
        p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in unit.iterdir() if p.name in before
    } == before
    rehashed = sk(cwd, "ckpt", "verify", "run_001/checkpoint-50", "--json")
    assert rehashed.returncode == 0 and doc(rehashed)["results"][0]["digest"] is True
    again = sk(cwd, "ckpt", "adopt", "run_001/checkpoint-50")
    assert again.returncode == 1 and "already has manifest.json" in again.stderr


def test_adopt_refuses_an_incomplete_checkpoint(cwd: Path, sk: Any) -> None:
    unit = cwd / RUN / "checkpoint-60"
    unit.mkdir()
    (unit / "optimizer.pt").write_bytes(b"o")
    old(unit)
    proc = sk(cwd, "ckpt", "adopt", "run_001/checkpoint-60")
    assert proc.returncode == 1 and "not a complete checkpoint" in proc.stderr
    assert "hf-trainer: no trainer_state.json" in proc.stderr and not (unit / "manifest.json").exists()


def test_prune_plan_keeps_what_it_must(cwd: Path, sk: Any) -> None:
    run = cwd / RUN
    (run / "step_000050").mkdir()  # an old incomplete leftover
    (run / "step_000050/model.bin").write_bytes(b"x")
    old(run / "step_000050", days=3)
    (run / "step_000600").mkdir()  # in progress
    dry = ck(
        cwd, "ckpt", "prune", "run_001", "--keep-last", "1", "--keep-every", "200", "--dry-run", "--json"
    )
    assert dry.returncode == 0, dry.stderr
    actions = {a["path"].rsplit("/", 1)[1]: (a["action"], a["reason"]) for a in doc(dry)["actions"]}
    assert actions["step_000100"][0] == "delete" and actions["step_000300"][0] == "delete"
    assert actions["step_000200"] == ("keep", "step is a multiple of 200 (--keep-every)")
    assert actions["step_000400"] == ("keep", "named by a tracker or latest pointer")
    assert actions["step_000600"][0] == "keep" and "in progress" in actions["step_000600"][1]
    assert actions["step_000050"] == ("keep", "incomplete: deleted only with --incomplete-older-than")
    assert sorted(p.name for p in run.iterdir()) == [
        "latest", "step_000050", "step_000100", "step_000200", "step_000300", "step_000400", "step_000600"
    ]  # fmt: skip
    done = ck(
        cwd,
        "ckpt",
        "prune",
        "run_001",
        "--keep-last",
        "1",
        "--keep-every",
        "200",
        "--incomplete-older-than",
        "2d",
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in run.iterdir()) == ["latest", "step_000200", "step_000400", "step_000600"]


@pytest.mark.parametrize(  # --fast kills at one point, CI (slow included) at each
    "point",
    [
        pytest.param("ckpt.prune.before-delete@2", marks=pytest.mark.slow),
        "durable.tombstoned",
        pytest.param("durable.tombstoned@2", marks=pytest.mark.slow),
    ],
)
def test_prune_killed_at_each_step_then_rerun(cwd: Path, point: str) -> None:
    run = cwd / RUN
    killed = ck(cwd, "ckpt", "prune", "run_001", "--keep-last", "1", faults=f"{point}=kill")
    assert killed.returncode == -signal.SIGKILL
    names = sorted(p.name for p in run.iterdir())
    # no half-deleted directory under a step name: what remains under a step name is whole
    for name in names:
        if name.startswith("step_"):
            assert (run / name / "manifest.json").exists() and (run / name / "model.bin").exists()
    assert ck(cwd, "ckpt", "latest", "run_001").stdout.strip().endswith("step_000400")
    rerun = ck(cwd, "ckpt", "prune", "run_001", "--keep-last", "1")
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in run.iterdir()) == ["latest", "step_000400"]
    check = ck(cwd, "layout", "check", "--json")
    assert check.returncode == 0, check.stdout


def test_bad_arguments(cwd: Path, sk: Any) -> None:
    assert sk(cwd, "ckpt", "prune", "run_001", "--keep-last", "0").returncode == 2
    usage = sk(cwd, "ckpt", "adopt", "run_001", "--json")
    assert usage.returncode == 2 and "name one checkpoint" in doc(usage)["error"]["message"]
    assert sk(cwd, "ckpt", "list", "run_001/step_000100/deeper").returncode == 2


@pytest.mark.parametrize("command", ["list", "latest", "verify", "adopt", "prune"])
def test_help_fits_80_columns_with_examples(tmp_path: Path, command: str, sk: Any) -> None:
    proc = sk(tmp_path, "ckpt", command, "--help")
    assert proc.returncode == 0
    assert "Examples" in proc.stdout and "storekit ckpt " + command in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80


def test_deepspeed_latest_naming_a_half_written_step(cwd: Path, sk: Any) -> None:
    """DeepSpeed's rank 0 wrote `latest` = global_step3 while rank 1 was killed before its ZeRO shard:
    `ckpt latest` prints global_step2, says why, exits 4; prune keeps a loadable step and the pointer."""
    from tests.unit.checkpoint.test_recorded import load, materialize

    run = cwd / "storage/checkpoints/run_002"
    run.mkdir()
    materialize(run, load("deepspeed-rank-killed"))
    old(run)
    latest = sk(cwd, "ckpt", "latest", "run_002")
    assert latest.returncode == 4
    assert latest.stdout == f"{run / 'global_step2'}\n"
    assert "latest: names global_step3, which is incomplete" in latest.stderr
    assert "zero_pp_rank_1_mp_rank_00_optim_states.pt" in latest.stderr
    assert "hint: the newest complete checkpoint is global_step2" in latest.stderr
    as_json = doc(sk(cwd, "ckpt", "latest", "run_002", "--json"))
    assert as_json["ok"] is False and as_json["unit"]["name"] == "global_step2"
    assert [p["path"] for p in as_json["pointer_problems"]] == ["checkpoints/run_002/latest"]
    pruned = sk(cwd, "ckpt", "prune", "run_002", "--keep-last", "1", "--incomplete-older-than", "1h")
    assert pruned.returncode == 0, pruned.stderr
    assert sorted(p.name for p in run.iterdir()) == [
        "global_step2", "global_step3", "latest", "zero_to_fp32.py", "zero_to_torch.py"
    ]  # fmt: skip
    assert (run / "latest").read_text() == "global_step3"  # the operator's to change
    assert "hint: the newest complete checkpoint is global_step2" in pruned.stderr
    assert sk(cwd, "ckpt", "verify", "run_002/global_step3").returncode == 4


def test_verify_of_a_run_reports_its_half_written_step_and_tracker(cwd: Path, sk: Any) -> None:
    """`ckpt verify RUN` on the recorded DeepSpeed run whose rank 1 was killed mid-save: the step its
    `latest` names and the tracker are damage (exit 4); the loadable steps pass; one in progress
    is no damage."""
    from tests.unit.checkpoint.test_recorded import load, materialize

    (cwd / RUN / "step_000500").mkdir()  # being written right now
    assert sk(cwd, "ckpt", "verify", "run_001").returncode == 0
    run = cwd / "storage/checkpoints/run_002"
    run.mkdir()
    materialize(run, load("deepspeed-rank-killed"))
    old(run)
    proc = sk(cwd, "ckpt", "verify", "run_002", "--json")
    assert proc.returncode == 4, proc.stderr
    results = {r["path"].rsplit("/", 1)[1]: r for r in doc(proc)["results"]}
    assert {name: r["ok"] for name, r in results.items()} == {
        "global_step1": True, "global_step2": True, "global_step3": False
    }  # fmt: skip
    assert "zero_pp_rank_1_mp_rank_00_optim_states.pt is missing" in results["global_step3"]["note"]
    assert doc(proc)["ok"] is False
    assert [p["path"] for p in doc(proc)["pointer_problems"]] == ["checkpoints/run_002/latest"]
    human = sk(cwd, "ckpt", "verify", "run_002")
    assert human.returncode == 4
    assert "run_002/global_step3: FAILED" in human.stdout
    assert "latest: names global_step3, which is incomplete" in human.stderr
    assert "hint: the newest complete checkpoint is global_step2" in human.stderr
    assert (run / "latest").read_text() == "global_step3"


def test_verify_and_adopt_take_a_path_outside_the_tiers(cwd: Path, sk: Any) -> None:
    run = cwd / "elsewhere/run_x"  # not below the tier root (storage/)
    for step in (4, 5):
        with commit(run, step) as stage, stage.open("model.bin") as fh:
            fh.write(b"m" * 1000)
    (run / "step_000005/model.bin").write_bytes(b"m" * 10)  # truncated
    one = sk(cwd, "ckpt", "verify", str(run / "step_000005"), "--json")
    assert one.returncode == 4
    assert [(r["path"], r["ok"], r["problems"]) for r in doc(one)["results"]] == [
        ("run_x/step_000005", False, [{"path": "model.bin", "problem": "size 10 != manifest 1000"}])
    ]
    good = sk(cwd, "ckpt", "verify", str(run / "step_000004"))
    assert good.returncode == 0 and "OK (re-hashed; 1 files" in good.stdout
    hf = cwd / "elsewhere/run_y/checkpoint-6"
    hf.mkdir(parents=True)
    (hf / "trainer_state.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"w" * 77)
    adopted = sk(cwd, "ckpt", "adopt", str(hf))
    assert adopted.returncode == 0, adopted.stderr
    files = json.loads((hf / "manifest.json").read_text())["files"]
    assert sorted((f["path"], f["size"]) for f in files) == [
        ("model.safetensors", 77),
        ("trainer_state.json", 2),
    ]


def test_a_tier_relative_path_outside_the_checkpoints_area(cwd: Path, sk: Any) -> None:
    """scratch/job_7/run_x/STEP is relative to the tier root (it starts with an area of the layout),
    not taken for checkpoints/scratch/...: verify re-hashes it, adopt writes its manifest."""
    run = cwd / "storage/scratch/job_7/run_x"
    for step in (4, 5):
        with commit(run, step) as stage, stage.open("model.bin") as fh:
            fh.write(b"m" * 1000)
    (run / "step_000005/model.bin").write_bytes(b"m" * 10)  # truncated
    one = sk(cwd, "ckpt", "verify", "scratch/job_7/run_x/step_000005", "--json")
    assert one.returncode == 4, one.stderr
    assert [(r["path"], r["problems"]) for r in doc(one)["results"]] == [
        ("scratch/job_7/run_x/step_000005", [{"path": "model.bin", "problem": "size 10 != manifest 1000"}])
    ]
    whole = sk(cwd, "ckpt", "verify", "scratch/job_7/run_x", "--json")
    assert whole.returncode == 4
    assert [r["ok"] for r in doc(whole)["results"]] == [True, False]
    latest = sk(cwd, "ckpt", "latest", "scratch/job_7/run_x")
    assert (latest.returncode, latest.stdout) == (0, f"{run / 'step_000005'}\n")
    hf = cwd / "storage/scratch/job_7/run_y/checkpoint-6"
    hf.mkdir(parents=True)
    (hf / "trainer_state.json").write_text("{}")
    adopted = sk(cwd, "ckpt", "adopt", "scratch/job_7/run_y/checkpoint-6")
    assert adopted.returncode == 0, adopted.stderr
    assert [f["path"] for f in json.loads((hf / "manifest.json").read_text())["files"]] == [
        "trainer_state.json"
    ]
    assert sk(cwd, "ckpt", "latest", "checkpoints/run_001").stdout == f"{cwd / RUN / 'step_000400'}\n"


def test_verify_reports_every_damage_with_exit_4(cwd: Path, sk: Any) -> None:
    run = cwd / RUN
    (run / "step_000100/manifest.json").write_text('{"schema')  # damaged manifest
    (run / "step_000200/model.bin").write_bytes(b"")  # a truncated file, in the next step
    (run / "step_000300/notes.txt").write_text("added after the commit")  # an extra file
    proc = sk(cwd, "ckpt", "verify", "run_001", "--json")
    assert proc.returncode == 4, proc.stderr
    problems = {r["path"].rsplit("/", 1)[1]: r["problems"] for r in doc(proc)["results"]}
    assert problems["step_000100"][0]["path"] == "manifest.json"
    assert "not a valid manifest" in problems["step_000100"][0]["problem"]
    assert problems["step_000200"] == [{"path": "model.bin", "problem": "size 0 != manifest 2000"}]
    assert problems["step_000300"] == [
        {"path": "notes.txt", "problem": "not in the manifest (added after the commit)"}
    ]
    assert problems["step_000400"] == []
    single = sk(cwd, "ckpt", "verify", "run_001/step_000100")
    assert single.returncode == 4 and "manifest.json: not a valid manifest" in single.stdout


@pytest.mark.parametrize(
    ("pointer", "says"),
    [
        ("step_000900", "names step_000900, which does not exist"),
        ("../run_002/step_000100", "a pointer names a unit of its run only"),
        (None, "a directory where the tracker file"),
    ],
)
def test_latest_says_when_the_pointer_is_wrong(cwd: Path, sk: Any, pointer: str | None, says: str) -> None:
    latest = cwd / RUN / "latest"
    latest.unlink()
    if pointer is None:
        latest.mkdir()
    else:
        latest.write_text(pointer + "\n")
    proc = sk(cwd, "ckpt", "latest", "run_001")
    assert proc.returncode == 4
    assert proc.stdout == f"{cwd / RUN / 'step_000400'}\n"
    assert says in proc.stderr and "hint: the newest complete checkpoint is step_000400" in proc.stderr
    assert latest.is_dir() if pointer is None else latest.read_text() == pointer + "\n"


def test_prune_without_keep_last_is_one_line(cwd: Path, sk: Any) -> None:
    proc = sk(cwd, "ckpt", "prune", "run_001")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == (
        "error: --keep-last N is required: how many of the newest complete checkpoints to keep"
    )
    assert len(proc.stderr.splitlines()) <= 2 and "╭" not in proc.stderr


def test_list_and_prune_know_the_layouts_temp_names(cwd: Path, sk: Any) -> None:
    run = cwd / RUN
    for leftover in ("step_000001.partial", ".tmpabc"):  # `*.partial`, `.tmp*` in llm-cluster.toml
        (run / leftover).mkdir()
        (run / leftover / "model.bin").write_bytes(b"half")
        old(run / leftover)
    listed = doc(sk(cwd, "ckpt", "list", "run_001", "--json"))
    units = {u["name"]: u for u in listed["units"]}
    assert units["step_000001.partial"]["state"] == "incomplete" and units[".tmpabc"]["is_temp"] is True
    assert listed["problems"] == []  # not "misnamed"
    pruned = sk(cwd, "ckpt", "prune", "run_001", "--keep-last", "4", "--incomplete-older-than", "1h")
    assert pruned.returncode == 0, pruned.stderr
    assert not (run / "step_000001.partial").exists() and not (run / ".tmpabc").exists()
    assert sorted(p.name for p in run.iterdir() if p.name.startswith("step_")) == [
        "step_000100", "step_000200", "step_000300", "step_000400"
    ]  # fmt: skip
