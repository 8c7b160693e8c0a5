"""Cross-task dedup opens each task's hashes once per pass: tasks + buckets, not tasks x buckets."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from storekit.pipeline import dedup
from storekit.pipeline.taskparts import HASH_DTYPE

_counting: list[int] = []


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _counting and event == "open":
        _counting[0] += 1


sys.addaudithook(_hook)  # audit hooks stay for the process: it counts only while _counting is set


def _hash_files(tmp_path: Path, tasks: int, per_task: int) -> tuple[list[Path], int]:
    rng = random.Random(5)
    pool = [(rng.getrandbits(64), rng.getrandbits(64)) for _ in range(tasks * per_task // 2)]
    files, seen, dups = [], set(), 0
    for task in range(tasks):
        hashes = rng.sample(pool, per_task)
        dups += sum(h in seen for h in hashes)
        seen.update(hashes)
        rec = np.zeros(per_task, dtype=HASH_DTYPE)
        rec["hi"], rec["lo"] = zip(*hashes, strict=True)
        rec["doc"] = np.arange(per_task)
        path = tmp_path / f"h{task}.rec"
        path.write_bytes(rec[np.lexsort((rec["lo"], rec["hi"]))].tobytes())
        files.append(path)
    return files, dups


@pytest.mark.parametrize("open_buckets", [256, 4])
def test_file_opens_grow_with_tasks_plus_buckets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_buckets: int
) -> None:
    tasks, per_task = 60, 40
    monkeypatch.setattr(dedup, "BUCKET_ENTRIES", 100)  # 2400 entries -> 24 buckets
    monkeypatch.setattr(dedup, "OPEN_BUCKETS", open_buckets)
    files, dups = _hash_files(tmp_path, tasks, per_task)
    buckets = 24
    _counting.append(0)
    try:
        index = dedup.find_cross_task_duplicates(files, tmp_path / "dedup")
        drops = [index.for_task(t) for t in range(tasks)]
    finally:
        opens = _counting.pop()
    passes = -(-buckets // open_buckets)
    # per pass: each task's hashes once and each spill file once; then a spill and a drops file
    # per bucket, each written and read once; for_task opens nothing
    assert opens <= passes * tasks + 4 * buckets, opens
    # (the old code opened every task's file in every bucket: 1440 here, and again per task at assembly)
    assert index.count == dups == sum(len(d) for d in drops)
