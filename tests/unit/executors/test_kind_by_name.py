"""`local` and `slurm` are executors of one interface, chosen by name, and run a job kind that
only a test module registered (stamp_kind.py): the job layer and slurm/ learn everything about it
(how to load it, what its elements run on a node, how its work dirs are named) from what it
registered. The Slurm case runs on the real test cluster (STOREKIT_TEST_SLURM=1)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from storekit.errors import ExitCode, UsageError
from storekit.executors.base import executor_for_option, executor_names, get_executor, load_job
from storekit.executors.kinds import PLUGINS_ENV
from storekit.executors.local import LocalExecutor
from storekit.jobdir import JobDir
from storekit.jobs.find import job_dirs_under
from storekit.slurm.executor import SlurmExecutor
from tests.unit.executors import stamp_kind

REPO = Path(__file__).resolve().parents[3]
SIZES = [300, 70, 1000]


def test_local_and_slurm_are_registered_executors_chosen_by_name() -> None:
    assert executor_names() == ["local", "slurm"]
    local, slurm = get_executor("local"), get_executor("slurm")
    assert isinstance(local, LocalExecutor) and (local.name, local.detached) == ("local", False)
    assert isinstance(slurm, SlurmExecutor) and (slurm.name, slurm.detached) == ("slurm", True)
    with pytest.raises(UsageError, match=r"^--executor 'pbs': expected local or slurm$") as info:
        executor_for_option("pbs")
    assert info.value.exit_code == ExitCode.USAGE


def test_a_kind_registered_by_a_test_module_runs_on_the_local_executor_by_name(tmp_path: Path) -> None:
    work = stamp_kind.make(tmp_path / f"{stamp_kind.PREFIX}one", SIZES)
    (tmp_path / "storekit-prepare-not-a-job").mkdir()  # a name alone makes no job dir
    assert job_dirs_under(tmp_path) == [work.path]  # its prefix is learned from its registration
    job = load_job(work.path, None)
    seen: dict[int, dict[str, object]] = {}
    report = get_executor("local").run(
        job, [0, 1, 2], workers=2, progress=lambda d, n, b: None, on_done=lambda i, r: seen.__setitem__(i, r)
    )
    assert report.tasks_run == 3 and sorted(seen) == [0, 1, 2]
    for i, size in enumerate(SIZES):
        assert (work.task_dir(i) / "out.bin").read_bytes() == stamp_kind.expected(i, size, None)
        work.check_parts(i, work.read_done(i))


def test_a_kind_registered_by_a_test_module_runs_on_the_slurm_executor_by_name(
    tmp_path: Path, slurm_cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the elements (fresh processes on the nodes) learn the kind from the submitting environment
    monkeypatch.setenv(PLUGINS_ENV, stamp_kind.MODULE)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    work = stamp_kind.make(tmp_path / f"{stamp_kind.PREFIX}two", SIZES)
    work.record_failure(1, "an earlier attempt failed", exit_code=1)
    job = load_job(work.path, None)
    seen: dict[int, dict[str, object]] = {}
    report = get_executor("slurm").run(
        job, [0, 1, 2], workers=1, progress=lambda d, n, b: None, on_done=lambda i, r: seen.__setitem__(i, r)
    )
    assert report.tasks_run == 3 and sorted(seen) == [0, 1, 2]
    nodes = set()
    for i, size in enumerate(SIZES):
        data = (work.task_dir(i) / "out.bin").read_bytes()
        node = data[len(stamp_kind.payload(i, size)) :].decode()
        assert re.fullmatch(r"@sk-node\d+", node), node  # the kind's on_node adapter ran there
        assert data == stamp_kind.expected(i, size, node[1:])
        work.check_parts(i, work.read_done(i))
        nodes.add(node)
    assert work.read_failure(1) is None  # the element that succeeded cleared the old failure
    # the caller finalizes, as after a local run: the elements finalized nothing
    (array,) = [s for s in work.submissions() if s.extra.get("role") == "array"]
    assert array.extra["finalize"] is False
    assert not [s for s in work.submissions() if s.extra.get("role") == "finalize"]
    log_dir = Path(array.extra["log_dir"])
    assert log_dir == tmp_path / "storekit-logs" / work.path.name
    assert sorted(p.name for p in log_dir.glob("*.out")) == [f"{array.job_id}_{e}.out" for e in range(3)]
    assert not (log_dir / "finalize.sbatch").exists()
    assert os.environ[PLUGINS_ENV] == stamp_kind.MODULE


def test_a_kind_module_that_cannot_be_imported_is_one_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PLUGINS_ENV, "tests.no_such_kind_module")
    work = JobDir(tmp_path / "job")
    work.create()
    work.write_plan(b"{}", kind="some-other-kind", tasks=1)
    with pytest.raises(
        UsageError, match=r"^\$STOREKIT_JOB_KINDS: cannot import job kind module 'tests.no_such"
    ) as info:
        load_job(work.path, None)
    assert info.value.exit_code == ExitCode.USAGE
