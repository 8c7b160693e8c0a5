"""storekit inside real Slurm jobs: an sbatch job array whose tasks run storekit on a shared tier."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_storekit

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).parents[2]
TASKS = 4
WAIT_S = 180

TASK_SCRIPT = """#!/bin/bash
# one array task: storekit commands against the shared tier; outputs and exit codes per task
set -u
out="$OUTDIR/task_${SLURM_ARRAY_TASK_ID}"
echo "$SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_JOB_ID $(hostname)" > "$out.env"
"$PY" -m storekit config show --json --config "$CFG" > "$out.show.json" 2> "$out.show.err"
echo $? > "$out.show.rc"
"$PY" -m storekit init --tier shared --json --config "$CFG" > "$out.init.json" 2> "$out.init.err"
echo $? > "$out.init.rc"
"$PY" -m storekit config check --tier shared --json --config "$CFG" > "$out.check.json" 2> "$out.check.err"
echo $? > "$out.check.rc"
"""


def slurm(*args: str, timeout: float = 30) -> str:
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}"
    return proc.stdout


def field(record: str, name: str) -> str:
    found = re.search(rf"\b{name}=(\S+)", record)
    assert found, f"no {name} in: {record}"
    return found[1]


def wait_for(job: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while slurm("squeue", "-h", "-j", job, "-o", "%i %T").strip():
        if time.monotonic() > deadline:
            queue = slurm("squeue", "-j", job)
            nodes = slurm("sinfo", "-N")
            pytest.fail(f"job {job} not finished after {WAIT_S}s:\n{queue}\n{nodes}")
        time.sleep(0.5)


def test_sbatch_array_runs_storekit_on_a_shared_tier(slurm_cluster: None, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    outdir = tmp_path / "out"
    (shared / "storage").mkdir(parents=True)
    outdir.mkdir()
    cfg = shared / "storekit.toml"
    cfg.write_text('default_tier = "shared"\n[tiers.shared]\nurl = "./storage"\nrole = "parallel"\n')
    script = shared / "task.sh"
    script.write_text(TASK_SCRIPT)
    script.chmod(0o755)

    env = {**os.environ, "PY": sys.executable, "CFG": str(cfg), "OUTDIR": str(outdir)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("STOREKIT_CONFIG", None)
    submitted = subprocess.run(
        ["sbatch", "--parsable", f"--array=0-{TASKS - 1}", "--job-name=storekit-test", f"--chdir={shared}",
         f"--output={outdir}/slurm-%A_%a.out", "--time=5", str(script)],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    assert job.isdigit(), submitted.stdout
    try:
        wait_for(job)
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=30)  # no-op once finished

    # Slurm's own record: every array task completed with exit code 0
    records = slurm("scontrol", "-o", "show", "job", job).strip().splitlines()
    states = sorted(
        (int(field(r, "ArrayTaskId")), field(r, "JobState"), field(r, "ExitCode")) for r in records
    )
    assert states == [(i, "COMPLETED", "0:0") for i in range(TASKS)], records

    expected_url = (shared / "storage").resolve().as_uri()
    # the capabilities each task probes on its node must be what this host probes for the same shared path
    here = subprocess.run(
        [sys.executable, "-m", "storekit", "config", "check", "--tier", "shared", "--json",
         "--config", str(cfg)],
        env=env, cwd=shared, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert here.returncode == 0, here.stderr
    expected_caps = json.loads(here.stdout)["tiers"][0]["capabilities"]
    assert expected_caps["atomic_rename"] is True and expected_caps["free_space"] is True
    job_ids = set()
    for i in range(TASKS):
        out = outdir / f"task_{i}"
        array_job, task_id, job_id, _host = (out.with_suffix(".env")).read_text().split()
        assert (array_job, task_id) == (job, str(i))
        job_ids.add(job_id)
        for step in ("show", "init", "check"):
            rc = Path(f"{out}.{step}.rc").read_text().strip()
            assert rc == "0", f"task {i} {step}: exit {rc}: {Path(f'{out}.{step}.err').read_text()}"
        show = json.loads(Path(f"{out}.show.json").read_text())
        assert show["command"] == "config show" and show["source"] == str(cfg)
        assert [(t["name"], t["url"], t["role"]) for t in show["tiers"]] == [
            ("shared", expected_url, "parallel")
        ]
        check = json.loads(Path(f"{out}.check.json").read_text())
        assert check["tiers"] == [
            {
                "name": "shared",
                "url": expected_url,
                "reachable": True,
                "error": None,
                "capabilities": expected_caps,
            }
        ]
        init = json.loads(Path(f"{out}.init.json").read_text())
        assert init["command"] == "init" and init["applied"] is True
    assert len(job_ids) == TASKS  # each array task is its own Slurm job

    # the tasks initialised the shared tier concurrently: the layout is complete and clean
    assert sorted(p.name for p in (shared / "storage").iterdir()) == [
        "checkpoints", "datasets", "logs", "models", "scratch",
    ]  # fmt: skip
    check = run_storekit(["layout", "check", "--json", "--config", str(cfg)], env=env, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


MIN_NODES = 2


def test_the_test_cluster_emulates_several_nodes_and_a_second_partition(
    slurm_cluster: None, tmp_path: Path
) -> None:
    """Multi-node behaviour (arrays spread over nodes, per-node agents) needs several slurmd."""
    nodes = sorted(set(slurm("sinfo", "-h", "-N", "-p", "debug", "-o", "%N").split()))
    if len(nodes) < MIN_NODES:
        from tests.conftest import IN_CI

        message = f"the Slurm cluster has {len(nodes)} node(s) {nodes}; multi-node tests need {MIN_NODES}+"
        if IN_CI:
            pytest.fail(message + " (scripts/services/slurm-up.sh starts SLURM_NODES=4)")
        pytest.skip(message)
    partitions = set(slurm("sinfo", "-h", "-o", "%R").split())
    assert len(partitions) >= 2, partitions

    # one task per node, as `srun --ntasks-per-node=1` starts the bench agents: every node answers
    out = tmp_path / "nodes.out"
    submitted = slurm(
        "sbatch", "--parsable", f"--nodes={len(nodes)}", "--ntasks-per-node=1", "--job-name=storekit-nodes",
        f"--output={out}", "--time=5", "--wrap", "srun bash -c 'echo $SLURMD_NODENAME'",
    )  # fmt: skip
    job = submitted.strip().split(";")[0]
    try:
        wait_for(job)
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=30)
    assert sorted(out.read_text().split()) == nodes
