"""`jobs rerun` of a job that ran as one Slurm job step (bench io across nodes): refused, with no
promise to resume (a benchmark is run again), before any Slurm command."""

from __future__ import annotations

from pathlib import Path

import pytest

from storekit.errors import ExitCode, UsageError
from storekit.jobdir import JobDir, Submission
from storekit.slurm.rerun import rerun


def test_a_job_step_is_not_resubmitted_by_task(tmp_path: Path) -> None:
    work = JobDir(tmp_path / "storekit-bench-io-1")
    work.create()
    work.write_plan(b"{}", kind="bench-io", tasks=1)
    work.record_failure(0, "node sk-node2 dropped its connection", exit_code=5)
    step = Submission(executor="slurm", job_id="41", extra={"role": "step", "step_id": "41.0"})
    work.record_submission(step)
    with pytest.raises(UsageError, match="ran as one Slurm job step") as info:
        rerun(work.path)
    assert info.value.exit_code == ExitCode.USAGE
    assert "resume" not in f"{info.value.message} {info.value.hint}"
