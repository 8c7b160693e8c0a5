"""bench io keeps the page cache out of its reads without touching anyone else's: by default only the
run's own files are evicted (posix_fadvise DONTNEED, verified with mincore); the node-wide drop
(/proc/sys/vm/drop_caches, which empties every co-tenant's cache) happens only with --drop-caches."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from storekit.bench import pagecache as cache
from tests.conftest import run_cli

MiB = 1024 * 1024
ARGS = ["--pattern", "shards", "--size", "8M", "--file-size", "2M", "--workers", "1", "--repeat", "2"]


def fs_type(path: Path) -> str:
    best = ("", "")
    with open("/proc/self/mounts") as fh:
        for line in fh:
            _, mount, kind = line.split()[:3]
            if str(path).startswith(mount) and len(mount) > len(best[0]):
                best = (mount, kind)
    return best[1]


def test_evict_drops_exactly_our_files_pages_and_mincore_sees_it(tmp_path: Path) -> None:
    if fs_type(tmp_path) in ("tmpfs", "ramfs"):
        pytest.skip("on tmpfs the page cache is the storage: nothing can be evicted")
    ours, other = tmp_path / "ours.bin", tmp_path / "other.bin"
    for path in (ours, other):
        path.write_bytes(os.urandom(8 * MiB))
        path.read_bytes()  # now in the page cache
    assert (cache.resident_fraction([str(ours)]) or 0) > 0.9
    assert cache.evict([str(ours)]) == 1
    assert (cache.resident_fraction([str(ours)]) or 0) < 0.05
    assert (cache.resident_fraction([str(other)]) or 0) > 0.9  # a neighbour's pages stay


@pytest.fixture
def drops(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record node-wide drops instead of doing them (a test must not empty the host's cache)."""
    calls: list[int] = []

    def record() -> tuple[bool, str]:
        calls.append(1)
        return True, ""

    monkeypatch.setattr(cache, "drop_caches", record)
    return calls


def run_bench(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    target = tmp_path / "target"
    target.mkdir(exist_ok=True)
    res = run_cli(["bench", "io", "--target", str(target), *ARGS, *extra, "--json", "-q"], capsys)
    assert res.code == 0, res.stderr
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


def test_by_default_only_the_runs_own_files_are_evicted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], drops: list[int]
) -> None:
    doc = run_bench(tmp_path, capsys)
    assert drops == []  # the node's cache was never dropped
    honesty = doc["honesty"]
    assert isinstance(honesty, dict)
    assert honesty["drop_caches"]["requested"] is False and honesty["drop_caches"]["done"] is False
    assert "only this run's files are evicted" in honesty["drop_caches"]["reason"]
    eviction = honesty["eviction"]
    assert "POSIX_FADV_DONTNEED" in eviction["method"] and "mincore" in eviction["verified_with"]
    assert eviction["files_evicted"] == 4 * 2  # 4 shard files, before each of 2 read phases
    if fs_type(tmp_path) not in ("tmpfs", "ramfs"):
        assert eviction["max_resident_before"] < 0.05
    (point,) = doc["results"]  # type: ignore[misc]
    read = point["phases"][1]
    assert [c["evicted_files"] for c in read["cache"]] == [4, 4] and not any(
        c["dropped"] for c in read["cache"]
    )


def test_the_node_wide_drop_is_an_explicit_choice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], drops: list[int]
) -> None:
    doc = run_bench(tmp_path, capsys, "--drop-caches")
    assert len(drops) == 2  # before each read phase
    honesty = doc["honesty"]
    assert isinstance(honesty, dict)
    assert honesty["drop_caches"] == {"requested": True, "done": True, "reason": None}
    assert honesty["eviction"]["files_evicted"] == 8  # own files are evicted as well
