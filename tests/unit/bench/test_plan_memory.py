"""A plan's size does not grow with --size: `bench io --size 1P` (33 million shard files) is planned,
shown by --dry-run and refused for lack of space with a few kilobytes, not a list of every file name.

Memory is measured with tracemalloc (allocations, not timing), so the test is exact on a loaded host.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from storekit.bench.patterns import build_plan
from storekit.bench.plan import NameRange
from storekit.bench.spec import TargetSpec, build_spec
from tests.conftest import run_cli

MiB = 1024 * 1024
BOUND = 2 * MiB  # what planning may allocate at its peak, whatever the size


def peak_allocated(work: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("size", ["64T", "1P"])
def test_planning_a_huge_size_allocates_a_bounded_amount(size: str) -> None:
    spec = build_spec(
        TargetSpec(kind="posix", root="/big"), size=size, file_size="32M", workers="1,4,16", files=1000
    )
    plan, peak = peak_allocated(lambda: build_plan(spec, "t", "/big/scratch/run"))
    assert peak < BOUND, f"planning {size} allocated {peak / MiB:.1f} MiB"
    files = spec.size // (32 * MiB)
    write = plan.points[0].phases[0]
    assert write.files == files and write.bytes == spec.size
    assert plan.setups[0].phase.files == files  # the token data set
    sixteen = next(p for p in plan.points if p.params == {"workers": 16, "block_size": MiB}).phases
    assert sixteen[0].tasks[15].files[-1] == f"shards/shard_{files - 1:05d}.bin"
    assert sixteen[1].tasks[15].files[0] == "shards/shard_00000.bin"  # reads worker 0's files
    _, shown = peak_allocated(lambda: json.dumps(plan.to_dict(), default=str))
    assert shown < BOUND  # --dry-run --json shows 4 names per worker, not all of them


@pytest.mark.parametrize("size", ["64T", "1P"])
def test_dry_run_and_run_of_a_huge_size_are_refused_before_planning(
    size: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "io", "--target", str(tmp_path), "--size", size, "--json"]
    for extra in (["--dry-run"], []):
        res, peak = peak_allocated(lambda extra=extra: run_cli([*args, *extra], capsys))
        assert res.code == 6, res.stderr
        assert json.loads(res.stdout)["error"]["message"].startswith(f"target {tmp_path} has ")
        assert peak < 16 * MiB, f"{extra}: {peak / MiB:.1f} MiB"
    assert list(tmp_path.iterdir()) == []  # nothing written, not even scratch/


def test_name_ranges_slice_like_the_lists_they_replace() -> None:
    names = NameRange("d/f_{:03d}", 0, 10)
    listed = [f"d/f_{i:03d}" for i in range(10)]
    assert list(names) == listed and len(names) == 10 and names[-1] == listed[-1]
    for w in range(3):
        assert list(names[w::3]) == listed[w::3]
        assert list(names[w::3][:2]) == listed[w::3][:2]
    assert len(NameRange("x{}", 0, 0)) == 0
