"""bench io across nodes, without Slurm: the wire format, clock offsets, the node-shifted plan,
per-node results, and real agent processes talking to a real coordinator over TCP (srun itself is
exercised in tests/integration/test_bench_io_slurm.py)."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storekit.bench.cluster.clock import ClockSample, estimate_offset, to_coordinator_clock
from storekit.bench.cluster.coordinator import Cluster, NodeFailed, NotConnected
from storekit.bench.cluster.wire import TOKEN_ENV, target_to_wire, task_from_wire, task_to_wire
from storekit.bench.leftovers import OWNER_FILE
from storekit.bench.patterns import build_plan, peak_bytes
from storekit.bench.plan import NameRange
from storekit.bench.results import WorkerResult, merge_phase, per_node
from storekit.bench.spec import TargetSpec, build_spec
from storekit.bench.stats import FINE_NS
from storekit.errors import UnreachableError, UsageError
from tests.conftest import REPO

SECOND = 1_000_000_000
T0 = 1_700_000_000 * SECOND
TARGET = TargetSpec(kind="posix", root="/shared/storage")


# -- the wire --------------------------------------------------------------------------------------
def test_tasks_travel_as_json_and_come_back_equal() -> None:
    spec = build_spec(TARGET, pattern="shards,meta", size="64M", file_size="8M", workers="2", nodes=2)
    plan = build_plan(spec, "r", "/shared/storage/scratch/run")
    tasks = [t for p in plan.points for ph in p.phases for t in ph.tasks]
    assert any(isinstance(t.files, NameRange) for t in tasks) and any(t.meta_count for t in tasks)
    for task in tasks:
        back = task_from_wire(task_to_wire(task), TARGET)
        assert back == task and list(back.files) == list(task.files)
    listed = task_from_wire(
        task_to_wire(tasks[0].__class__(**{**tasks[0].__dict__, "files": ("a", "b")})), TARGET
    )
    assert listed.files == ("a", "b")


def test_an_s3_targets_options_never_travel() -> None:
    target = TargetSpec(kind="s3", root="b/p", s3_options={"key": "AKIA", "secret": "s3cr3t"})
    assert "s3cr3t" not in repr(target_to_wire(target)) and "AKIA" not in repr(target_to_wire(target))


# -- clocks ----------------------------------------------------------------------------------------
def test_the_offset_comes_from_the_shortest_round_trip() -> None:
    offset = 3 * SECOND  # the node's clock runs 3 s ahead
    samples = [
        ClockSample(T0, T0 + 9_000_000 + offset, T0 + 10_000_000),  # slow answer: 10 ms, lopsided
        ClockSample(T0 + SECOND, T0 + SECOND + 100_000 + offset, T0 + SECOND + 200_000),  # 200 us
    ]
    got = estimate_offset(samples)
    assert got["offset_ns"] == offset and got["rtt_ns"] == 200_000 and got["uncertainty_ns"] == 100_000


def worker(index: int, node: str, start_ns: int, seconds: float, nbytes: int) -> WorkerResult:
    r = WorkerResult(worker=index, op="read", host="h", pid=index, start_ns=start_ns,
                     end_ns=start_ns + int(seconds * SECOND), node=node)  # fmt: skip
    steps = int(seconds * SECOND // FINE_NS)
    for i in range(steps):
        r.trace.add(start_ns + i * FINE_NS + FINE_NS // 2, nbytes // steps)
        r.latency.record(1_000_000)
    r.bytes, r.ops = nbytes // steps * steps, steps
    return r


def test_node_timestamps_are_moved_onto_the_coordinators_clock() -> None:
    """Both nodes really ran the same second; node b's clock is 5 s ahead. Uncorrected, the phase
    looks 6 s long with no all-active window; corrected, it is 1 s with both nodes active."""
    skew = 5 * SECOND
    a = worker(0, "a", T0, 1.0, 100_000_000)
    b = worker(1, "b", T0 + skew, 1.0, 100_000_000)
    wrong = merge_phase("read", [a, b])
    assert wrong.elapsed_s == pytest.approx(6.0) and wrong.stonewall["bandwidth_bytes_per_s"] is None
    a = worker(0, "a", T0, 1.0, 100_000_000)
    b = to_coordinator_clock(worker(1, "b", T0 + skew, 1.0, 100_000_000), skew)
    right = merge_phase("read", [a, b])
    assert right.elapsed_s == pytest.approx(1.0) and right.bandwidth == pytest.approx(200_000_000)
    assert right.stonewall["bandwidth_bytes_per_s"] == pytest.approx(200_000_000, rel=0.02)
    assert b.trace.origin == a.trace.origin  # the traces line up bucket for bucket


def test_per_node_rows_add_up_to_the_aggregate() -> None:
    results = [worker(0, "a", T0, 1.0, 100_000_000), worker(1, "a", T0, 2.0, 100_000_000),
               worker(2, "b", T0, 1.0, 50_000_000)]  # fmt: skip
    phase = merge_phase("read", results)
    rows = per_node("read", [phase])
    assert [(r["node"], r["workers"]) for r in rows] == [("a", 2), ("b", 1)]
    assert sum(r["bytes"] for r in rows) == phase.bytes
    assert rows[0]["bandwidth_bytes_per_s"] == pytest.approx(200_000_000 / 2.0)
    assert rows[1]["bandwidth_bytes_per_s"] == pytest.approx(50_000_000)
    assert per_node("read", [merge_phase("read", results[:2])]) == []  # one node: no breakdown


# -- the plan across nodes -------------------------------------------------------------------------
def writers_by_file(phase: Any) -> dict[str, int]:
    return {name: t.node for t in phase.tasks for name in t.files}


@pytest.mark.parametrize("nodes", [2, 3])
def test_no_node_reads_what_it_wrote(nodes: int) -> None:
    spec = build_spec(TARGET, pattern="shards,checkpoint,meta", size="96M", file_size="8M", workers="2",
                      ranks=2 * nodes, nodes=nodes)  # fmt: skip
    plan = build_plan(spec, "r", "/run")
    for point in plan.points:
        phases = {ph.op: ph for ph in point.phases}
        assert {t.node for ph in point.phases for t in ph.tasks} == set(range(nodes))
        if "write" in phases:
            wrote = writers_by_file(phases["write"])
            for t in phases["read"].tasks:
                assert all(wrote[name] != t.node for name in t.files), (point.label, t.worker)
        else:
            owners = {t.meta_owner: t.node for t in phases["create"].tasks}
            for ph in point.phases[1:]:
                assert all(owners[t.meta_owner] != t.node for t in ph.tasks), (point.label, ph.name)
    meta = next(p for p in plan.points if p.pattern == "meta")
    assert len(meta.phases[0].tasks) == 2 * nodes  # --workers is per node
    assert peak_bytes(spec) >= 2 * nodes * spec.files * 4096


def test_ranks_must_spread_evenly_and_one_node_keeps_its_config_hash() -> None:
    with pytest.raises(UsageError, match="--ranks 8 cannot be spread evenly over --nodes 3"):
        build_spec(TARGET, pattern="checkpoint", ranks=8, nodes=3)
    single = build_spec(TARGET, pattern="shards")
    assert "nodes" not in single.parameters()
    assert build_spec(TARGET, pattern="shards", nodes=1).config_hash() == single.config_hash()
    assert build_spec(TARGET, pattern="shards", nodes=2).config_hash() != single.config_hash()


# -- real agents over TCP (started here as srun would, with the node name and rank it sets) --------
@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    token = secrets.token_hex(8)

    def start(rank: int, *, key: str = token) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO), TOKEN_ENV: key, "SLURMD_NODENAME": f"node{rank}",
               "SLURM_PROCID": str(rank)}  # fmt: skip
        argv = [sys.executable, "-m", "storekit", "bench", "agent", "--connect", f"127.0.0.1:{port}"]
        procs.append(subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True))

    def accept(count: int, alive: Any = lambda: True) -> Cluster:
        return Cluster.accept(listener, count, token, alive=alive, connect_s=None)

    yield start, accept, procs
    listener.close()
    for p in procs:
        p.kill()
        p.wait()


def test_an_agent_without_the_runs_token_is_turned_away(agents: Any) -> None:
    start, accept, procs = agents
    start(0, key="not-the-token")
    with pytest.raises(UnreachableError, match="after 0 of 1 agents connected"):
        accept(1, alive=lambda: procs[0].poll() is None)  # it can only end by being turned away
    assert procs[0].returncode == 1
    assert "lost the coordinator" in procs[0].stderr.read()
    start(1)
    cluster = accept(1)
    assert [n.name for n in cluster.nodes] == ["node1"]
    cluster.measure_clocks()
    assert abs(cluster.nodes[0].clock["offset_ns"]) < SECOND and cluster.nodes[0].clock["samples"] == 8
    assert cluster.shutdown() == [{"node": "node1", "run_dir_gone": True}]
    assert procs[1].wait(timeout=60) == 0


def test_no_agent_connecting_after_the_step_started_ends_the_wait() -> None:
    """Every node stalls before its agent connects: once Slurm shows the job step running the
    deadline runs, with no first agent to start it (before, accept waited for ever)."""
    looks: list[int] = []

    def step_running() -> bool:
        looks.append(1)
        return True

    with socket.create_server(("127.0.0.1", 0)) as listener, pytest.raises(NotConnected) as caught:
        Cluster.accept(listener, 2, "t", alive=lambda: True, connect_s=0.2, step_running=step_running)
    assert caught.value.connected == [] and looks == [1]  # asked once: it was running


def test_a_node_that_cannot_see_the_run_directory_stops_every_node(agents: Any, tmp_path: Path) -> None:
    """Setup runs on every node: one that does not see the coordinator's run directory (a node-local
    target) fails the run with its name; the others are told to stop."""
    start, accept, procs = agents
    run_root = tmp_path / "scratch" / "storekit-bench-x"
    run_root.mkdir(parents=True)
    start(0)
    start(1)
    cluster = accept(2)
    cluster.measure_clocks()
    seen = TargetSpec(kind="posix", root=str(tmp_path))
    (run_root / OWNER_FILE).write_text("{}")
    cluster.setup(seen, str(run_root), 0, direct=False, meta=False)  # both see it: fine
    assert [n.info["node"] for n in cluster.nodes] == ["node0", "node1"]
    with pytest.raises(NodeFailed, match=r"node node\d failed: the run directory .* is not visible there"):
        cluster.setup(seen, str(tmp_path / "elsewhere"), 0, direct=False, meta=False)
    cluster.shutdown()
    assert [p.wait(timeout=60) for p in procs] == [0, 0]


def test_a_signalled_agent_says_why_once_and_exits_130(agents: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """srun's SIGTERM (here: injected at the agent's connect step) stops an agent with its own line;
    the coordinator reports the run's error, so the agent adds no 'error: interrupted' of its own."""
    start, _accept, procs = agents
    monkeypatch.setenv("STOREKIT_FAULTS", "bench.agent0.connect=term")
    start(0)
    assert procs[0].wait(timeout=60) == 130
    stderr = procs[0].stderr.read()
    assert "stopped by a signal; the coordinator reports why" in stderr, stderr
    assert [line for line in stderr.splitlines() if "error" in line] == [], stderr
