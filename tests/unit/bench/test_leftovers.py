"""A bench run killed outright leaves its scratch directory; the next run by the same user on the same
host removes it once the owner process is provably gone, and touches nothing else: live runs, other
hosts' runs on a shared filesystem, other users' runs, directories without an owner record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from storekit.bench.leftovers import OWNER_FILE, owner_record
from storekit.durable import TOMBSTONE_MARK
from tests.conftest import run_cli, run_storekit, start_storekit

META = ["--pattern", "meta", "--files", "5", "--workers", "1", "--repeat", "1", "--json", "-q"]


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(proc.stdout)


def leftover(scratch: Path, name: str, record: dict[str, Any] | None, *, data: bool = True) -> Path:
    run = scratch / f"storekit-bench-{name}"
    (run / "shards").mkdir(parents=True)
    if data:
        (run / "shards" / "shard_00000.bin").write_bytes(b"x" * 65536)
    if record is not None:
        (run / OWNER_FILE).write_text(json.dumps(record))
    return run


@pytest.fixture
def target(tmp_path: Path) -> Path:
    root = tmp_path / "storage"
    (root / "scratch").mkdir(parents=True)
    return root


def test_only_provably_dead_runs_of_ours_are_reclaimed(
    target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scratch = target / "scratch"
    me = owner_record()
    dead = leftover(scratch, "dead", {**me, "pid": dead_pid(), "start_ticks": -1})
    rebooted = leftover(scratch, "rebooted", {**me, "boot_id": "an-earlier-boot"})  # pid is alive now
    reused = leftover(scratch, "reused", {**me, "start_ticks": (me["start_ticks"] or 0) + 1})
    kept = {
        "live": leftover(scratch, "live", me),  # a run in progress (this very process)
        "elsewhere": leftover(scratch, "elsewhere", {**me, "pid": dead_pid(), "host": "other-node"}),
        "unmarked": leftover(scratch, "unmarked", None),
        "garbled": leftover(scratch, "garbled", None),
        "linked": leftover(scratch, "linked", None),
        "foreign": scratch / "not-a-bench-dir",
    }
    (kept["garbled"] / OWNER_FILE).write_text("{not json")
    (kept["linked"] / OWNER_FILE).symlink_to(dead / OWNER_FILE)  # a record reached through a link
    kept["foreign"].mkdir()
    tomb = scratch / f".storekit-bench-old{TOMBSTONE_MARK}0123456789ab"
    (tomb / "shards").mkdir(parents=True)
    if os.geteuid() == 0:
        other = kept["other-user"] = leftover(scratch, "other-user", {**me, "pid": dead_pid(), "uid": 65534})
        for path in (other, other / "shards", other / OWNER_FILE):
            os.chown(path, 65534, 65534)

    dry = run_cli(["bench", "io", "--target", str(target), *META, "--dry-run"], capsys)
    assert dry.code == 0, dry.stderr
    assert sorted(dry.json()["would_reclaim"]) == sorted(str(p) for p in (dead, rebooted, reused))
    assert dead.exists()  # a dry run removes nothing

    res = run_cli(["bench", "io", "--target", str(target), *META], capsys)
    assert res.code == 0, res.stderr
    reclaimed = res.json()["cleanup"]["reclaimed"]
    assert sorted(r["run_dir"] for r in reclaimed) == sorted(str(p) for p in (tomb, dead, rebooted, reused))
    assert all(r["bytes"] >= 65536 for r in reclaimed if r["pid"] is not None)
    assert not dead.exists() and not rebooted.exists() and not reused.exists() and not tomb.exists()
    for name, path in kept.items():
        assert path.exists(), name
    assert sorted(p.name for p in scratch.iterdir()) == sorted(p.name for p in kept.values())


def test_a_run_killed_with_sigkill_is_reclaimed_by_the_next(
    target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Killed at a fault point while its workers run; the next run removes what it left."""
    env = {"STOREKIT_FAULTS": "bench.write.started=kill"}
    args = ["bench", "io", "--target", str(target), "--pattern", "shards", "--size", "8M",
            "--file-size", "2M", "--workers", "2", "--repeat", "1", "-q"]  # fmt: skip
    killed = run_storekit(args, env=env, timeout=120)
    assert killed.returncode == -9, killed.stderr  # its pipes are closed: workers and forkserver are gone
    (run,) = (target / "scratch").iterdir()
    record = json.loads((run / OWNER_FILE).read_text())
    assert record["uid"] == os.getuid() and record["pid"] > 0

    res = run_cli(["bench", "io", "--target", str(target), *META], capsys)
    assert res.code == 0, res.stderr
    assert [r["run_dir"] for r in res.json()["cleanup"]["reclaimed"]] == [str(run)]
    assert not (target / "scratch").exists() or list((target / "scratch").iterdir()) == []


def test_workers_of_a_killed_run_die_with_it(target: Path, tmp_path: Path) -> None:
    """The worker is held before the start barrier (fault point `pause`, never released) when the
    coordinator is SIGKILLed: it must end by itself. It holds the command's output pipes, so the
    output closing proves it is gone; a leaked worker would keep them open until its barrier
    timeout (600 s), and this test would hit its 60 s limit instead."""
    env = {"STOREKIT_FAULTS": "bench.worker.prepared=pause", "STOREKIT_FAULT_DIR": str(tmp_path)}
    args = ["bench", "io", "--target", str(target), "--pattern", "shards", "--size", "1M",
            "--file-size", "1M", "--workers", "1", "--repeat", "1", "-q"]  # fmt: skip
    proc = start_storekit(args, env=env)
    reached = tmp_path / "bench.worker.prepared.reached"
    try:
        while not reached.exists():  # an event (the worker at its step), not a duration
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.02)
        proc.kill()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == -9, err
    assert len(list((target / "scratch").iterdir())) == 1  # left for the next run to reclaim
