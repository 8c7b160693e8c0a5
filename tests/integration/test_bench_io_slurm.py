"""bench io on several nodes of the real test Slurm (4 emulated nodes on one host): one agent per
node through srun, per-node and aggregate results, every node's view of the scratch cleaned, and an
abort from one node that reaches all of them (driven by fault points, not timing). Each run is a job
of the job layer: `storekit jobs status` shows how it ended, its Slurm job and its result."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import IN_CI, run_storekit, start_storekit, storekit_env, wait_reached
from tests.integration.test_slurm import wait_for

pytestmark = pytest.mark.slurm
NODES = 2
SMALL = ["--size", "4M", "--file-size", "1M", "--workers", "1", "--repeat", "1"]


@pytest.fixture(autouse=True)
def _own_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's runs keep their job records in tmp_path/state (the commands read
    $STOREKIT_STATE_DIR from this process's environment), not in the session's state dir, where
    `jobs status` of another test would list them."""
    monkeypatch.setenv("STOREKIT_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def slurm_nodes(slurm_cluster: None) -> list[str]:
    """The test cluster's node names; fewer than NODES fails in CI (slurm-up.sh starts four)."""
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=60)
    names = sorted(set(proc.stdout.split()))
    if proc.returncode != 0 or len(names) < NODES:
        why = f"bench io across nodes needs {NODES} Slurm nodes; sinfo lists {names} ({proc.stderr.strip()})"
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)
    return names


def bench(target: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_storekit(
        [
            "bench",
            "io",
            "--executor",
            "slurm",
            "--nodes",
            str(NODES),
            "--target",
            str(target),
            "--json",
            *args,
        ],
        env=env,
        timeout=300,
    )


def bench_jobs(state: Path) -> list[dict[str, Any]]:
    """The bench io jobs `storekit jobs status --json` finds for the user whose state dir is `state`
    (no TARGET: every place jobs are kept)."""
    proc = run_storekit(["jobs", "status", "--json"], env={"STOREKIT_STATE_DIR": str(state)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [job for job in json.loads(proc.stdout)["jobs"] if job["kind"] == "bench-io"]


def slurm_job_name(job_id: str) -> str:
    """What the controller calls job `job_id` (MinJobAge keeps a finished job an hour)."""
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("JobName=", 1)[1].split()[0]


def ended_record(state: Path, *, code: int, error: str, state_word: str, nodes: list[str]) -> None:
    """The run's one job record ended failed or cancelled: one failed task naming `error` and
    `code`, and the job step Slurm ran, on `nodes`, as its Slurm job."""
    [job] = bench_jobs(state)
    assert job["counts"] == {"done": 0, "running": 0, "failed": 1, "pending": 0}, job
    [failure] = job["failed"]
    assert (failure["error"], failure["exit_code"], failure["state"]) == (error, code, state_word), failure
    [step] = job["submissions"]
    assert step["executor"] == "slurm" and step["extra"]["role"] == "step", step
    assert sorted(step["extra"]["nodes"]) == sorted(nodes), step
    assert slurm_job_name(step["job_id"]).startswith("bench-io-") and "result" not in job
    assert not list(Path(job["work_dir"], "tasks").iterdir())  # nothing left running or half-written


def leftovers(target: Path) -> list[str]:
    scratch = target / "scratch"
    return sorted(p.name for p in scratch.iterdir()) if scratch.exists() else []


def stalled_agents(tmp_path: Path, *ranks: int) -> tuple[Path, Path, dict[str, str]]:
    """A shared target, a fault dir, and the environment that holds the agents of `ranks` before
    they connect (a node whose mount hangs)."""
    target = tmp_path / "shared"
    target.mkdir()
    faults = tmp_path / "faults"
    faults.mkdir()
    pauses = ",".join(f"bench.agent{rank}.connect=pause" for rank in ranks)
    return target, faults, {"STOREKIT_FAULTS": pauses, "STOREKIT_FAULT_DIR": str(faults)}


def no_agent_outlived(stderr: str) -> bool:
    """No agent of the run that printed `stderr` (all nodes' agents run on this host) is still alive."""
    connect = " ".join(stderr.split()).split("--connect ", 1)[1].split()[0]  # rich may wrap it
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=60).stdout
    return f"--connect {connect}" not in ps


def test_two_nodes_give_per_node_and_aggregate_results(
    slurm_nodes: list[str], tmp_path: Path, promtool: Any
) -> None:
    target = tmp_path / "shared"
    target.mkdir()
    prom = tmp_path / "bench.prom"
    state = tmp_path / "state"
    proc = bench(target, "--pattern", "shards,meta", "--files", "20", *SMALL, "--prometheus", str(prom))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    nodes = doc["environment"]["nodes"]
    names = [n["node"] for n in nodes]
    assert len(set(names)) == NODES and set(names) <= set(slurm_nodes), names  # from SLURMD_NODENAME
    for n in nodes:  # one host: the measured offset is the noise of the ping, well under a second
        assert n["clock"]["corrected"] is True and abs(n["clock"]["offset_ns"]) < 1e9
        assert n["environment"]["hostname"] and n["free_bytes"] > 0
        assert n["direct"]["requested"] is True and isinstance(n["direct"]["effective"], bool)
    assert doc["parameters"]["nodes"] == NODES
    shards = [p for p in doc["results"] if p["pattern"] == "shards"]
    assert shards
    for ph in shards[0]["phases"]:
        rows = ph["nodes"]
        assert sorted(r["node"] for r in rows) == sorted(names)
        assert all(r["workers"] == 1 and r["bandwidth_bytes_per_s"] > 0 for r in rows)
        aggregate = ph["repeats"][0]
        # the aggregate is every node's bytes over all nodes' first start .. last finish
        assert aggregate["workers"] == NODES
        assert (
            sum(r["bytes"] for r in rows) == aggregate["bytes"] == ph["planned_bytes_per_repeat"] == 4 << 20
        )
        hosts = {row["node"] for row in aggregate["stragglers"]}
        assert hosts == set(names)
    reads = next(ph for ph in shards[0]["phases"] if ph["phase"] == "read")
    evicted = reads["cache"][0]["nodes"]  # each node evicted what it was about to read
    assert sorted(e["node"] for e in evicted) == sorted(names)
    assert sum(e["evicted_files"] for e in evicted) == 4
    meta = [p for p in doc["results"] if p["pattern"] == "meta"]
    assert all(len(ph["nodes"]) == NODES for p in meta for ph in p["phases"])
    # every node's own view: the run directory is gone; and nothing is left on the target
    assert sorted(c["node"] for c in doc["cleanup"]["nodes"]) == sorted(names)
    assert all(c["run_dir_gone"] for c in doc["cleanup"]["nodes"])
    assert doc["cleanup"]["leftovers"] == [] and leftovers(target) == []
    text = prom.read_text()
    promtool(text)
    for name in names:
        assert f'node="{name}"' in text
    # the run is a job of the job layer: done, its Slurm job the agents' step, its result the document
    [job] = bench_jobs(state)
    assert job["counts"] == {"done": 1, "running": 0, "failed": 0, "pending": 0} and job["complete"], job
    [step] = job["submissions"]
    assert step["executor"] == "slurm" and step["extra"]["role"] == "step", step
    assert sorted(step["extra"]["nodes"]) == sorted(names), step
    assert slurm_job_name(step["job_id"]).startswith("bench-io-"), step
    result = job["result"]
    envelope = ("schema_version", "command")  # what --json wraps every command's document in
    assert json.loads(Path(result["document"]).read_text()) == {k: doc[k] for k in doc if k not in envelope}
    assert result["run_id"] == doc["run_id"] and sorted(result["nodes"]) == sorted(names)
    write = next(p for p in result["phases"] if p["pattern"] == "shards" and p["phase"] == "write")
    human = run_storekit(
        ["jobs", "status", job["work_dir"]], env={"STOREKIT_STATE_DIR": str(state)}, timeout=120
    )
    assert human.stdout.splitlines() == [
        f"{job['work_dir']} (bench-io, 1 tasks): 1 done, 0 running, 0 failed, 0 pending",
        f"  Slurm job {step['job_id']}: step {step['extra']['step_id']} on {', '.join(sorted(names))}",
        f"  result: {result['document']}",
    ], human.stdout
    assert write["bandwidth_bytes_per_s"] == shards[0]["phases"][0]["summary"]["bandwidth_bytes_per_s"]


@pytest.mark.parametrize(("action", "code", "says"), [("eio", 1, "failed"), ("kill", 5, "dropped")])
def test_one_node_failing_stops_every_node(
    slurm_nodes: list[str], tmp_path: Path, action: str, code: int, says: str
) -> None:
    """Agent rank 1 fails (or dies) once its workers are ready: the coordinator aborts the other node
    before anything is timed, every worker stops, the scratch is cleaned, and one line says why."""
    target = tmp_path / "shared"
    target.mkdir()
    mark = f"STOREKIT_TEST_RUN={uuid.uuid4().hex}"  # srun passes it to every agent and worker
    state = tmp_path / "state"
    env = {"STOREKIT_FAULTS": f"bench.agent1.ready={action}", **dict([mark.split("=")])}
    proc = bench(target, "--pattern", "shards", *SMALL, env=env)
    assert proc.returncode == code, proc.stderr
    doc = json.loads(proc.stdout)
    message = doc["error"]["message"] if isinstance(doc["error"], dict) else doc["error"]
    assert says in message and "node sk-" in message, message
    # its job record ended failed with the same reason, naming the node (a lost one: exit 5)
    [job] = bench_jobs(state)
    ended_record(
        state, code=code, error=message, state_word="failed", nodes=job["submissions"][0]["extra"]["nodes"]
    )
    if action == "kill":  # the node whose agent died is named, not one srun stopped after it
        assert "(rank 1) dropped" in message, message
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    if action == "eio":  # the healthy node heard the abort and stopped its workers itself
        assert "aborted by the coordinator" in proc.stderr, proc.stderr
    assert leftovers(target) == []
    assert no_agent_outlived(proc.stderr)  # no node's agent outlived the command
    # nor any worker: the killed agent's one waited at the start barrier, orphaned; it must end by
    # itself at once (it used to wait out its 600 s barrier timeout)
    assert wait_gone(mark, 60) == [], "workers of the run outlived their agent"


def wait_gone(mark: str, limit_s: float) -> list[int]:
    """Processes whose environment holds `mark`, once none is left or `limit_s` passed."""
    deadline = time.monotonic() + limit_s
    while (left := with_environ(mark)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def with_environ(mark: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and mark.encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
    return found


def test_dry_run_prints_the_srun_line_and_writes_nothing(slurm_nodes: list[str], tmp_path: Path) -> None:
    target = tmp_path / "shared"
    target.mkdir()
    state = tmp_path / "state"
    proc = bench(target, "--pattern", "shards", *SMALL, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert not state.exists() and bench_jobs(state) == []  # no job record either
    srun = json.loads(proc.stdout)["launch"]["srun"]
    assert srun[:5] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert srun[-4:-1] == ["bench", "agent", "--connect"]
    assert list(target.iterdir()) == []


def test_more_nodes_than_the_cluster_has_is_refused(slurm_nodes: list[str], tmp_path: Path) -> None:
    proc = run_storekit(["bench", "io", "--executor", "slurm", "--nodes", str(len(slurm_nodes) + 1),
                         "--target", str(tmp_path), "--pattern", "meta", *SMALL], timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"has {len(slurm_nodes)} node(s)" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_partition_is_refused_naming_the_known_ones(
    slurm_nodes: list[str], tmp_path: Path
) -> None:
    proc = run_storekit(["bench", "io", "--executor", "slurm", "--nodes", "1", "--slurm-partition", "nosuch",
                         "--target", str(tmp_path), "--pattern", "meta", *SMALL], timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    said = " ".join(proc.stderr.split())
    assert "--slurm-partition 'nosuch': no such partition on this cluster (known: cpu, debug, urgent)" in said
    assert list(tmp_path.iterdir()) == []


def test_controller_down_is_one_line_exit_5(slurm_nodes: list[str], tmp_path: Path) -> None:
    """The same cluster config with the controller's port moved where nothing listens."""
    conf = Path(os.environ["SLURM_CONF"]).read_text()
    lines = [line for line in conf.splitlines() if not line.startswith("SlurmctldPort=")]
    bad = tmp_path / "slurm.conf"
    bad.write_text("\n".join([*lines, "SlurmctldPort=9"]) + "\n")
    target = tmp_path / "shared"
    target.mkdir()
    args = [
        "bench",
        "io",
        "--executor",
        "slurm",
        "--nodes",
        "2",
        "--target",
        str(target),
        "--pattern",
        "shards",
        *SMALL,
    ]
    proc = run_storekit(args, env={"SLURM_CONF": str(bad)}, timeout=120)
    assert proc.returncode == 5, proc.stderr
    assert proc.stderr.startswith("error: sinfo failed: "), proc.stderr
    assert "Unable to contact slurm controller" in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.startswith("error:")]) == 1
    assert list(target.iterdir()) == []


def test_inside_an_sbatch_allocation_it_runs_on_the_allocations_nodes(
    slurm_nodes: list[str], tmp_path: Path
) -> None:
    """What an admin writes in a batch script: no --nodes, the allocation's nodes are used."""
    target = tmp_path / "shared"
    target.mkdir()
    out = tmp_path / "bench.json"
    command = [sys.executable, "-m", "storekit", "bench", "io", "--executor", "slurm",
               "--target", str(target), "--pattern", "shards", *SMALL, "--json"]  # fmt: skip
    wrap = f"{shlex.join(command)} > {shlex.quote(str(out))}"
    state = tmp_path / "state"
    submitted = subprocess.run(
        ["sbatch", "--parsable", f"--nodes={NODES}", "--time=5", f"--output={tmp_path}/slurm-%j.out",
         "--wrap", wrap],
        env=storekit_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    try:
        wait_for(job)
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=30)
    log = "".join(p.read_text() for p in tmp_path.glob("slurm-*.out"))
    doc = json.loads(out.read_text())
    names = sorted(n["node"] for n in doc["environment"]["nodes"])
    assert len(names) == NODES and set(names) <= set(slurm_nodes), log
    assert all(len(ph["nodes"]) == NODES for p in doc["results"] for ph in p["phases"])
    assert doc["parameters"]["nodes"] == NODES and leftovers(target) == []
    # a step of the allocation, not a new job (rich may wrap the line)
    assert "--nodes=2 --ntasks=2 --ntasks-per-node=1" in " ".join(log.split())
    # and its job record names the allocation's job, the agents' step in it, on its nodes
    [record] = bench_jobs(state)
    [step] = record["submissions"]
    assert record["counts"]["done"] == 1 and step["job_id"] == job, record
    assert step["extra"]["step_id"].startswith(f"{job}.") and sorted(step["extra"]["nodes"]) == names


def test_an_agent_that_never_connects_stops_the_run_naming_its_node(
    slurm_nodes: list[str], tmp_path: Path
) -> None:
    """Agent rank 1 stalls before connecting (a node with a hung mount): once the first agent has
    connected the other has --slurm-connect-timeout; then one line names the node that did not
    connect (exit 5), the step is stopped, and no agent tells anyone to resume a benchmark. (The
    healthy agent has as long from the job step's start: it connects within ~1 s on a quiet host;
    20 s leaves room for a host at load 20, where a 5 s bound could fire first.)"""
    target, faults, env = stalled_agents(tmp_path, 1)
    state = tmp_path / "state"
    proc = bench(target, "--pattern", "shards", *SMALL, "--slurm-connect-timeout", "20", env=env)
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert (faults / "bench.agent1.connect.reached").exists()
    message = json.loads(proc.stdout)["error"]["message"]
    stalled, rest = message.split(": its agent did not connect within 20 s of the first (1 of 2 connected: ")
    connected = rest.rstrip(")")
    assert stalled.startswith("node sk-node") and connected.startswith("sk-node") and stalled[5:] != connected
    # the job record: failed, naming the node whose agent never connected
    ended_record(state, code=5, error=message, state_word="failed", nodes=[stalled[5:], connected])
    assert not promises_resume(proc.stderr), proc.stderr
    assert leftovers(target) == []
    assert no_agent_outlived(proc.stderr)  # the stalled agent was stopped with the step


def promises_resume(stderr: str) -> bool:
    """Whether anything in `stderr` tells the operator to resume (a benchmark is run again). A stalled
    agent stopped with its step may get to say so itself ("…run again, not resumed") before it goes."""
    return "resume" in stderr.replace("not resumed", "")


def test_agents_that_all_stall_stop_the_run_naming_every_node(slurm_nodes: list[str], tmp_path: Path) -> None:
    """Every agent stalls before connecting (the mount they start from hangs on every node): no
    agent connects first, so the deadline runs from the job step's start; one line names both
    nodes (exit 5) instead of 'starting 2 agents' for ever with the allocation held."""
    target, faults, env = stalled_agents(tmp_path, *range(NODES))
    # 20 s: both agents reach their pause within it even on a loaded host (the asserts below)
    proc = bench(target, "--pattern", "shards", *SMALL, "--slurm-connect-timeout", "20", env=env)
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert (faults / "bench.agent0.connect.reached").exists() and (
        faults / "bench.agent1.connect.reached"
    ).exists()
    message = json.loads(proc.stdout)["error"]["message"]
    stalled, rest = message.split(": their agents did not connect within 20 s of the job step's start ")
    assert rest == "(0 of 2 connected)", message
    names = stalled.removeprefix("nodes ").split(", ")
    assert len(names) == NODES and set(names) <= set(slurm_nodes), message
    assert len([line for line in proc.stderr.splitlines() if line.startswith("error:")]) == 1, proc.stderr
    assert not promises_resume(proc.stderr) and leftovers(target) == []
    assert no_agent_outlived(proc.stderr)  # the stalled agents were stopped with the step


def test_ctrl_c_while_agents_stall_stops_the_step_and_promises_no_resume(
    slurm_nodes: list[str], tmp_path: Path
) -> None:
    """What an operator does at 'starting 2 agents' that never ends: Ctrl-C (once every agent has
    stalled, seen through the fault points). One line, exit 130, no 'rerun to resume' (a benchmark
    is run again), and no agent outlives the command."""
    target, faults, env = stalled_agents(tmp_path, *range(NODES))
    state = tmp_path / "state"
    args = ["bench", "io", "--executor", "slurm", "--nodes", str(NODES), "--target", str(target),
            "--pattern", "shards", *SMALL]  # fmt: skip
    proc = start_storekit(args, env=env)
    try:
        wait_reached(faults, proc, *(f"bench.agent{rank}.connect" for rank in range(NODES)))
        [running] = bench_jobs(state)  # while the command runs, its record says so
        assert running["counts"]["running"] == 1 and running["running"] == [
            {"task": 0, "by": f"pid {proc.pid} on {socket.gethostname()}"}
        ], running
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: interrupted while waiting for {NODES} agents to connect; their job step is stopped"
    ]
    assert not promises_resume(err), err
    assert no_agent_outlived(err) and leftovers(target) == []
    # the job record: cancelled (exit 130), with the same reason, on the step's nodes
    [job] = bench_jobs(state)
    nodes = job["submissions"][0]["extra"]["nodes"]
    assert len(nodes) == NODES
    ended_record(
        state, code=130, error=errors[0].removeprefix("error: "), state_word="cancelled", nodes=nodes
    )
