"""`layout clean` asks the real Slurm: scratch/<jobid> of a queued job stays, a finished job's goes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.unit.layout.test_clean import make, run

pytestmark = pytest.mark.slurm


def test_a_queued_jobs_scratch_is_kept_and_a_gone_jobs_is_removed(
    slurm_cluster: None, tmp_path: Path
) -> None:
    # held: the job stays in the queue for as long as the test needs, whatever the machine's load
    argv = ["sbatch", "--hold", "--parsable", "--wrap", "true"]
    submit = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert submit.returncode == 0, submit.stderr
    job = submit.stdout.strip().split(";")[0]
    try:
        assert run(tmp_path, "init", "--quiet").returncode == 0
        storage = tmp_path / "storage"
        make(storage, job, 30)
        make(storage, f"{job}_2", 30)  # an array task of the same job id
        gone = str(int(job) + 1_000_000)  # no such job in the queue
        make(storage, gone, 30)
        proc = run(tmp_path, "layout", "clean", "--json")
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["slurm"] == "asked"
        actions = {e["path"]: (e["action"], e["reason"]) for e in doc["entries"]}
        assert actions[f"scratch/{job}"] == ("keep", f"Slurm job {job} is still in the queue")
        assert actions[f"scratch/{job}_2"][0] == "keep"
        assert actions[f"scratch/{gone}"][0] == "delete"
        assert sorted(p.name for p in (storage / "scratch").iterdir()) == sorted([job, f"{job}_2"])
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=30)
