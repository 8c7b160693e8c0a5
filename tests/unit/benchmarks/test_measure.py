"""The benchmarks' process-tree measurement (benchmarks/_measure.py): the tree it walks, what it waits for."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# a parent with two children; all three wait on stdin, so the tree stays put while it is inspected
TREE = (
    "import subprocess, sys\n"
    "kids = [subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], stdin=subprocess.PIPE)"
    " for _ in range(2)]\n"
    "print(' '.join(str(k.pid) for k in kids), flush=True)\n"
    "sys.stdin.read()\n"
    "for k in kids:\n"
    "    k.stdin.close(); k.wait()\n"
)


@pytest.fixture()
def measure() -> Iterator[object]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import _measure

        yield _measure
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def test_the_tree_walk_finds_what_a_scan_of_proc_finds(measure: object) -> None:
    m = measure
    if not m.HAVE_CHILDREN_FILES:  # type: ignore[attr-defined]
        pytest.skip("this kernel has no /proc/PID/task/TID/children")
    root = subprocess.Popen([sys.executable, "-c", TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert root.stdout is not None
        kids = {int(p) for p in root.stdout.readline().split()}
        assert len(kids) == 2
        walked = m._descendants(root.pid)  # type: ignore[attr-defined]
        assert sorted(walked) == sorted(m._descendants_by_scan(root.pid))  # type: ignore[attr-defined]
        assert set(walked) == kids
    finally:
        assert root.stdin is not None
        root.stdin.close()
        root.wait()
    assert m._descendants(root.pid) == []  # type: ignore[attr-defined]


def test_wall_time_waits_for_an_orphaned_grandchild_and_counts_its_cpu(tmp_path: Path) -> None:
    done = tmp_path / "grandchild-done"
    # the child exits at once; the grandchild (re-parented to the harness) burns CPU, then leaves a file
    grandchild = (
        f"import pathlib; sum(i * i for i in range(3_000_000)); pathlib.Path({str(done)!r}).write_text('x')"
    )
    child = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {grandchild!r}]); sys.exit(3)"
    # in a process of its own: becoming a subreaper would make pytest the parent of every orphan after
    harness = (
        "import json, sys, pathlib\n"
        f"sys.path.insert(0, {str(REPO / 'benchmarks')!r})\n"
        "import _measure\n"
        "assert _measure.become_subreaper()\n"
        f"r = _measure.run_measured([sys.executable, '-c', {child!r}])\n"
        f"print(json.dumps([r.returncode, r.cpu_s, pathlib.Path({str(done)!r}).exists()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", harness], capture_output=True, text=True, check=True)
    returncode, cpu_s, finished = json.loads(out.stdout)
    assert returncode == 3
    assert finished  # the grandchild had written its file when run_measured returned
    assert cpu_s > 0.05  # its loop is counted


def test_a_command_past_its_timeout_is_killed_and_our_other_children_are_left_alone(measure: object) -> None:
    """The harness's own children from before the command (here one waiting on stdin; in pytest a
    multiprocessing forkserver) are neither waited for nor reaped."""
    m = measure
    bystander = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        result = m.run_measured(  # type: ignore[attr-defined]
            [sys.executable, "-c", "import signal; signal.pause()"], timeout=0.5
        )
        assert result.returncode == -9
        assert bystander.poll() is None  # still running, still ours to wait for
    finally:
        assert bystander.stdin is not None
        bystander.stdin.close()
        assert bystander.wait() == 0
