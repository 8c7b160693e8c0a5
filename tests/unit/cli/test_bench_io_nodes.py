"""`bench io --executor slurm` refusals that need no Slurm: one line, the right exit code, nothing
written (the runs themselves are in tests/integration/test_bench_io_slurm.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_storekit

SMALL = ["--pattern", "shards", "--size", "4M", "--file-size", "1M", "--workers", "1"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--nodes", "2"], "--nodes needs --executor slurm"),
        (["--executor", "slurm"], "--executor slurm needs --nodes N outside an sbatch/salloc allocation"),
        (["--executor", "pbs", "--nodes", "2"], "--executor 'pbs': expected local or slurm"),
        (["--executor", "slurm", "--nodes", "2", "--target", "s3://bucket/x"], "shared POSIX filesystem"),
    ],
)
def test_usage_errors_are_one_line_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    argv = ["bench", "io", "--json", *SMALL, *args]
    if "--target" not in args:
        argv += ["--target", str(tmp_path)]
    proc = run_storekit(argv, env={"SLURM_JOB_ID": ""}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert says in json.loads(proc.stdout)["error"]["message"]
    assert proc.stderr.count("error:") == 1
    assert list(tmp_path.iterdir()) == []


def test_without_srun_it_is_one_line_exit_5(tmp_path: Path) -> None:
    argv = ["bench", "io", "--executor", "slurm", "--nodes", "2", "--target", str(tmp_path), *SMALL]
    proc = run_storekit(argv, env={"PATH": str(tmp_path / "no-bin")}, timeout=120)
    assert proc.returncode == 5, proc.stderr
    assert (
        proc.stderr.splitlines()[0] == "error: srun not found: Slurm's client commands are not installed here"
    )
    assert list(tmp_path.iterdir()) == []
