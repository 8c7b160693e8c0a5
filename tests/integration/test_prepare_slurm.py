"""`prepare dataset --executor slurm` on the real Slurm (4 emulated nodes): an array + finalize job."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_storekit, start_storekit
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl

pytestmark = pytest.mark.slurm
WAIT_S = 300


def squeue_ids(job_ids: list[str], env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        ["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i %T %R"],
        env=None if env is None else {**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def wait_gone(job_ids: list[str], env: dict[str, str] | None = None) -> None:
    """Until Slurm no longer lists the jobs (they finished, failed or were cancelled); a job held
    after a failed launch never leaves the queue, so that fails at once."""
    deadline = time.monotonic() + WAIT_S
    while queue := squeue_ids(job_ids, env):
        if time.monotonic() > deadline or "launch failed" in queue:
            pytest.fail(f"jobs {job_ids} still queued after {WAIT_S}s or held:\n{queue}")
        time.sleep(1)


def make_site(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "shared"
    (root / "storage").mkdir(parents=True)
    cfg = root / "storekit.toml"
    cfg.write_text('default_tier = "shared"\n[tiers.shared]\nurl = "./storage"\nrole = "parallel"\n')
    assert run_storekit(["init", "--tier", "shared", "--config", str(cfg)]).returncode == 0
    corpus = root / "corpus"
    write_jsonl(corpus / "a.jsonl", sample_records(300_000))
    write_jsonl(corpus / "b.jsonl", sample_records(200_000, skip=400) + sample_records(20_000))  # dups
    return cfg, corpus


def prepare_args(cfg: Path, corpus: Path, version: str, *extra: str) -> list[str]:
    return [
        "prepare", "dataset", "-i", str(corpus), "--tokenizer", TOKENIZER, "--name", "web",
        "--version", version, "--task-size", "64KiB", "--config", str(cfg), "--json", *extra,
    ]  # fmt: skip


def dataset_files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.name != "manifest.json"}


def comparable(manifest: dict[str, Any]) -> dict[str, Any]:
    body = dict(manifest)
    for key in ("created", "dataset", "timings", "output"):
        body.pop(key, None)
    return body


def submit(args: list[str]) -> dict[str, Any]:
    proc = run_storekit(args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    assert doc["status"] == "submitted", doc
    return doc


def test_an_array_over_the_nodes_builds_the_same_bytes_as_a_local_run(
    slurm_cluster: None, tmp_path: Path
) -> None:
    cfg, corpus = make_site(tmp_path)
    local = run_storekit(prepare_args(cfg, corpus, "v1", "--workers", "2"))
    assert local.returncode == 0, local.stderr
    dry = run_storekit(prepare_args(cfg, corpus, "v2", "--executor", "slurm", "--dry-run"))
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert planned["status"] == "planned" and "exec " in planned["slurm"]["sbatch"]["array"]
    assert not Path(planned["plan"]["work_dir"]).exists()  # a dry run writes nothing

    # --slurm-wait: the command returns once the dataset is published (and the work dir removed)
    proc = run_storekit(
        prepare_args(cfg, corpus, "v2", "--executor", "slurm", "--slurm-cpus", "1", "--slurm-wait")
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    storage = cfg.parent / "storage" / "datasets" / "text" / "web"
    a, b = storage / "v1", storage / "v2"
    assert doc["status"] == "prepared" and (b / "manifest.json").is_file(), doc
    assert not Path(doc["plan"]["work_dir"]).exists()  # finalize removed it before the command returned
    assert doc["manifest"]["stats"]["tokens"] > 0 and doc["waited_seconds"] > 0, doc
    slurm = doc["slurm"]
    assert slurm["elements"] >= 4, slurm
    script = Path(slurm["array_script"]).read_text()
    assert "#SBATCH --cpus-per-task=1" in script and "testsecret" not in script
    wait_gone([slurm["array_job_id"], slurm["finalize_job_id"]])  # the elements' last log lines
    assert dataset_files(a) == dataset_files(b)  # every shard byte-identical
    ma = json.loads((a / "manifest.json").read_bytes())
    mb = json.loads((b / "manifest.json").read_bytes())
    assert comparable(ma)["shards"] == comparable(mb)["shards"]
    assert ma["sources"] == mb["sources"] and ma["stats"] == mb["stats"]
    assert not Path(doc["plan"]["work_dir"]).exists()  # finalize removed it
    logs = "".join(p.read_text() for p in Path(slurm["log_dir"]).glob("*.out"))
    assert "tasks to run" in logs and "sk-node" in logs
    # the element that finished the last task published it; the finalize job found it done (exit 0)
    assert logs.count("every task is done: finalizing here") == 1, logs
    finalize_log = (Path(slurm["log_dir"]) / f"{slurm['finalize_job_id']}.out").read_text()
    assert finalize_log.startswith("already prepared: ") and finalize_log.count("\n") == 1, finalize_log
    verify = run_storekit(["dataset", "verify", "datasets/text/web/v2", "--config", str(cfg)])
    assert verify.returncode == 0, verify.stderr


def test_a_failed_task_publishes_nothing_is_named_with_its_log_and_rerun_completes_it(
    slurm_cluster: None, tmp_path: Path
) -> None:
    cfg, corpus = make_site(tmp_path)
    bad = corpus / "c.jsonl"
    good_line = json.dumps({"text": "def fixed():\n    return 1\n"}).encode()
    bad.write_bytes(b'{"text": "def broken(" \n' + good_line + b"\n")  # line 1: malformed JSON
    args = prepare_args(cfg, corpus, "v1", "--executor", "slurm", "--slurm-cpus", "1", "--on-error", "fail")
    waited = run_storekit([*args, "--slurm-wait"])  # returns once the jobs have left the queue
    assert waited.returncode == 1, waited.stdout + waited.stderr
    error = json.loads(waited.stdout)["error"]
    assert "ended without publishing" in error["message"] and "jobs status" in error["hint"], error
    dataset = cfg.parent / "storage" / "datasets" / "text" / "web" / "v1"
    assert not (dataset / "manifest.json").exists()  # nothing published

    status = run_storekit(["jobs", "status", "datasets/text/web/v1", "--config", str(cfg), "--json"])
    assert status.returncode == 0, status.stderr
    job = json.loads(status.stdout)["jobs"][0]
    array = next(s for s in job["submissions"] if s["extra"]["role"] == "array")
    ids = [s["job_id"] for s in job["submissions"]]
    assert squeue_ids(ids) == ""  # it returned because they had all left the queue
    slurm = {"log_dir": array["extra"]["log_dir"]}
    assert job["counts"]["failed"] >= 1 and not job["complete"], job
    failure = job["failed"][0]
    assert str(bad) in failure["error"] and failure["exit_code"] == 1
    assert failure["log"] and Path(failure["log"]).is_file()  # the element's Slurm log
    assert str(bad) in Path(failure["log"]).read_text()
    assert job["slurm"]["finalize"][0]["state"] in ("CANCELLED", "PENDING"), job["slurm"]

    bad.write_bytes(good_line + b"\n")  # fixed: no finished task read it, so the plan follows
    # and the element that finishes last fails to finalize: the finalize job is the fallback
    rerun_args = ["jobs", "rerun", "datasets/text/web/v1", "--config", str(cfg), "--json"]
    proc = run_storekit(rerun_args, env={"STOREKIT_FAULTS": "slurm.inline-finalize=eio"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    again = json.loads(proc.stdout)
    assert again["task_count"] == job["counts"]["failed"] + job["counts"]["pending"]
    assert str(bad) in again["refreshed_sources"]
    # right after the rerun the old array's failures are history: the tasks are open again
    status = run_storekit(["jobs", "status", "datasets/text/web/v1", "--config", str(cfg), "--json"])
    assert json.loads(status.stdout)["jobs"][0]["counts"]["failed"] == 0, status.stdout
    wait_gone([again["array_job_id"], again["finalize_job_id"]])
    logs = "".join(p.read_text() for p in Path(slurm["log_dir"]).glob(f"{again['array_job_id']}_*.out"))
    assert "finalizing here did not finish" in logs and "Input/output error" in logs, logs
    assert "prepared" in (Path(slurm["log_dir"]) / f"{again['finalize_job_id']}.out").read_text()
    manifest = json.loads((dataset / "manifest.json").read_bytes())
    assert manifest["stats"]["errors"] == {} or not any(manifest["stats"]["errors"].values())
    assert run_storekit(["dataset", "verify", "datasets/text/web/v1", "--config", str(cfg)]).returncode == 0


def test_a_preempted_element_requeues_itself_resumes_and_finalize_still_runs(
    slurm_cluster: None, tmp_path: Path
) -> None:
    """USR1 (Slurm's notice before the time limit) reaches the exec'd storekit at a fault point:
    it keeps its finished task, requeues itself, exits 0, and the requeued run skips what is done."""
    cfg, corpus = make_site(tmp_path)
    faults = tmp_path / "faults"
    faults.mkdir()
    held = "slurm.element-task-done=pause,executor.stopping=pause"
    env = {"STOREKIT_FAULTS": held, "STOREKIT_FAULT_DIR": str(faults)}
    args = prepare_args(cfg, corpus, "v1", "--executor", "slurm", "--slurm-cpus", "1",
                        "--slurm-tasks-per-element", "1000")  # fmt: skip  # one element runs every task
    proc = run_storekit(args, env=env)
    assert proc.returncode == 0, proc.stderr
    slurm = json.loads(proc.stdout)["slurm"]
    assert slurm["elements"] == 1 and slurm["tasks"] >= 3
    reached = faults / "slurm.element-task-done.reached"
    deadline = time.monotonic() + WAIT_S
    while not reached.exists():  # the element finished its first task and is held there
        assert time.monotonic() < deadline, squeue_ids([slurm["array_job_id"]])
        time.sleep(0.2)
    signal = subprocess.run(["scancel", "--signal=USR1", "--batch", f"{slurm['array_job_id']}_0"],
                            capture_output=True, text=True, timeout=30)  # fmt: skip
    assert signal.returncode == 0, signal.stderr
    stopping = faults / "executor.stopping.reached"
    while not stopping.exists():  # the element took the signal: its stop is under way
        assert time.monotonic() < deadline, squeue_ids([slurm["array_job_id"]])
        time.sleep(0.2)
    (faults / "executor.stopping.go").touch()
    (faults / "slurm.element-task-done.go").touch()  # later passes (the requeued run) go on
    wait_gone([slurm["array_job_id"], slurm["finalize_job_id"]])

    log = (Path(slurm["log_dir"]) / f"{slurm['array_job_id']}_0.out").read_text()
    assert "requeued job" in log, log
    runs = [ln for ln in log.splitlines() if "tasks to run" in ln]
    assert len(runs) == 2, log
    assert runs[0].split(": ")[1].split(" of ")[0] != runs[1].split(": ")[1].split(" of ")[0]  # skipped done
    dataset = cfg.parent / "storage" / "datasets" / "text" / "web" / "v1"
    assert (dataset / "manifest.json").is_file()  # finalize ran after the requeued element succeeded
    local = run_storekit(prepare_args(cfg, corpus, "v2", "--workers", "1"))
    assert local.returncode == 0, local.stderr
    assert dataset_files(dataset) == dataset_files(dataset.parent / "v2")


def test_an_element_started_before_its_array_is_recorded_waits_for_the_record(
    slurm_cluster: None, tmp_path: Path
) -> None:
    """sbatch gives the array id before the submitting command writes it to jobs.json: the submitter
    is held right there while Slurm starts the element, which waits for the record instead of
    failing; let go, the submitter records it and the job completes."""
    cfg, corpus = make_site(tmp_path)
    faults = tmp_path / "faults"
    faults.mkdir()
    env = {"STOREKIT_FAULTS": "slurm.array-not-recorded=pause", "STOREKIT_FAULT_DIR": str(faults)}
    args = prepare_args(cfg, corpus, "v1", "--executor", "slurm", "--slurm-cpus", "1",
                        "--slurm-tasks-per-element", "1000")  # fmt: skip  # one element
    proc = start_storekit(args, env=env)
    logs = cfg.parent / "storage" / "logs"
    try:
        deadline = time.monotonic() + WAIT_S
        while not any("waiting up to" in p.read_text() for p in logs.rglob("*_0.out")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, sorted(str(p) for p in logs.rglob("*"))
            time.sleep(0.2)
        assert (faults / "slurm.array-not-recorded.reached").exists()  # the submitter is still held
        (faults / "slurm.array-not-recorded.go").touch()
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out + err
    slurm = json.loads(out)["slurm"]
    wait_gone([slurm["array_job_id"], slurm["finalize_job_id"]])
    log = (Path(slurm["log_dir"]) / f"{slurm['array_job_id']}_0.out").read_text()
    assert "waiting up to 60 s for the submitting command to record" in log and "tasks to run" in log, log
    dataset = cfg.parent / "storage" / "datasets" / "text" / "web" / "v1"
    assert (dataset / "manifest.json").is_file()


def test_a_submitter_failing_after_the_arrays_sbatch_cancels_it_and_a_resubmission_completes(
    slurm_cluster: None, tmp_path: Path
) -> None:
    """The submitter writes the plan after sbatch (it overlaps Slurm's scheduling); the disk filling
    up right then (injected): exit 6 naming the work dir, the array cancelled, nothing recorded or
    published; the same command again completes from the work dir left behind."""
    cfg, corpus = make_site(tmp_path)
    args = prepare_args(cfg, corpus, "v1", "--executor", "slurm", "--slurm-cpus", "1",
                        "--slurm-tasks-per-element", "1000", "--slurm-wait")  # fmt: skip  # one element
    failed = run_storekit(args, env={"STOREKIT_FAULTS": "jobs.plan-written=enospc"})
    assert failed.returncode == 6, failed.stdout + failed.stderr
    error = json.loads(failed.stdout)["error"]
    assert "storekit-prepare-web-v1" in error["message"], error
    logs = cfg.parent / "storage" / "logs"
    jobs = subprocess.run(["scontrol", "-o", "show", "job"], capture_output=True, text=True, timeout=30)
    ours = [line for line in jobs.stdout.splitlines() if f"StdOut={logs}" in line]
    assert len(ours) == 1, ours  # the array; no finalize job
    array = ours[0].split("ArrayJobId=", 1)[1].split()[0]
    # an element Slurm had already started shows COMPLETING until its processes are gone
    wait_gone([array])
    final = subprocess.run(
        ["scontrol", "-o", "show", "job", array], capture_output=True, text=True, timeout=30
    )
    assert "JobState=CANCELLED" in final.stdout, final.stdout
    work = next((cfg.parent / "storage" / "scratch").glob("storekit-prepare-web-v1-*"))
    assert not (work / "jobs.json").exists() and not (work / "job.json").exists()
    dataset = cfg.parent / "storage" / "datasets" / "text" / "web" / "v1"
    assert not dataset.exists()
    again = run_storekit(args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["status"] == "prepared"
    assert (dataset / "manifest.json").is_file() and not work.exists()


def test_rerun_with_every_task_done_waits_for_a_live_finalize_else_submits_a_lone_one(
    slurm_cluster: None, tmp_path: Path
) -> None:
    """The inline finalize fails (injected) and the finalize job is held, then cancelled: every task
    is done, nothing is published, and only a finalize job is left to submit."""
    cfg, corpus = make_site(tmp_path)
    faults = tmp_path / "faults"
    faults.mkdir()
    env = {
        "STOREKIT_FAULTS": "slurm.inline-finalize=eio,finalize.staged=pause",
        "STOREKIT_FAULT_DIR": str(faults),
    }
    proc = run_storekit(prepare_args(cfg, corpus, "v1", "--executor", "slurm", "--slurm-cpus", "1"), env=env)
    assert proc.returncode == 0, proc.stderr
    slurm = json.loads(proc.stdout)["slurm"]
    deadline = time.monotonic() + WAIT_S
    while not (faults / "finalize.staged.reached").exists():  # the finalize job runs, held
        assert time.monotonic() < deadline, squeue_ids([slurm["array_job_id"], slurm["finalize_job_id"]])
        time.sleep(0.2)
    rerun = ["jobs", "rerun", "datasets/text/web/v1", "--config", str(cfg), "--json"]
    busy = run_storekit(rerun)
    assert busy.returncode == 5, busy.stdout + busy.stderr
    assert f"finalize job {slurm['finalize_job_id']} is running" in busy.stdout, busy.stdout
    cancel = subprocess.run(["scancel", slurm["finalize_job_id"]], capture_output=True, text=True, timeout=30)
    assert cancel.returncode == 0, cancel.stderr
    wait_gone([slurm["array_job_id"], slurm["finalize_job_id"]])
    dataset = cfg.parent / "storage" / "datasets" / "text" / "web" / "v1"
    assert not (dataset / "manifest.json").exists()

    proc = run_storekit(rerun)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lone = json.loads(proc.stdout)
    assert lone["task_count"] == 0 and lone["array_job_id"] is None and lone["finalize_job_id"], lone
    wait_gone([lone["finalize_job_id"]])
    assert (dataset / "manifest.json").is_file()
    assert run_storekit(["dataset", "verify", "datasets/text/web/v1", "--config", str(cfg)]).returncode == 0


def test_no_slurm_commands_or_a_controller_down_is_one_line_exit_5_and_writes_nothing(
    slurm_cluster: None, tmp_path: Path
) -> None:
    cfg, corpus = make_site(tmp_path)
    conf = Path(os.environ["SLURM_CONF"]).read_text()
    down = tmp_path / "slurm.conf"  # the same cluster with the controller's port where nothing listens
    kept = [ln for ln in conf.splitlines() if not ln.startswith(("SlurmctldPort=", "MessageTimeout="))]
    down.write_text("\n".join([*kept, "SlurmctldPort=9", "MessageTimeout=1"]) + "\n")  # 1 s, not 10
    no_path = {"PATH": str(Path(sys.executable).parent)}  # python, but no sbatch/scontrol
    for env, said in ((no_path, "not installed here"), ({"SLURM_CONF": str(down)}, "Unable to contact")):
        proc = run_storekit(prepare_args(cfg, corpus, "v1", "--executor", "slurm"), env=env)
        assert proc.returncode == 5, proc.stdout + proc.stderr
        error = json.loads(proc.stdout)["error"]["message"]
        assert said in error and "\n" not in error, error
    scratch = cfg.parent / "storage" / "scratch"
    assert not scratch.exists() or not any(scratch.iterdir())  # no work dir was made


@pytest.fixture
def small_array_cluster(slurm_cluster: None) -> Iterator[dict[str, str]]:
    """A private one-node Slurm with MaxArraySize=3 (the shared test cluster keeps Slurm's 1001):
    slurm-up.sh on free ports and its own state dir; slurm-down.sh stops exactly its daemons."""
    scripts = REPO / "scripts" / "services"
    state = Path(tempfile.mkdtemp(prefix="sk-slurm-"))  # short: slurmstepd's socket paths cap at 108
    env = {**os.environ, "STOREKIT_SLURM_DIR": str(state), "SLURMCTLD_PORT": str(_free_port()),
           "SLURMD_PORT": str(_free_port()), "SLURM_NODES": "1", "SLURM_NODE_CPUS": "2",
           "SLURM_MAX_ARRAY_SIZE": "3"}  # fmt: skip
    up = subprocess.run([str(scripts / "slurm-up.sh")], env=env, capture_output=True, text=True, timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        yield {"SLURM_CONF": str(state / "slurm.conf")}
    finally:
        subprocess.run([str(scripts / "slurm-down.sh"), "--wipe"], env=env, capture_output=True, timeout=120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_more_tasks_than_max_array_size_run_several_per_element_and_complete(
    small_array_cluster: dict[str, str], tmp_path: Path
) -> None:
    cfg, corpus = make_site(tmp_path)
    proc = run_storekit(prepare_args(cfg, corpus, "v1", "--executor", "slurm", "--slurm-cpus", "1"),
                        env=small_array_cluster)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    slurm = json.loads(proc.stdout)["slurm"]
    assert slurm["max_array_size"] == 3 and slurm["tasks"] > 3, slurm  # read from this cluster's config
    assert slurm["elements"] <= 3 and slurm["tasks_per_element"] >= 2, slurm
    assert f"#SBATCH --array=0-{slurm['elements'] - 1}" in Path(slurm["array_script"]).read_text()
    wait_gone([slurm["array_job_id"], slurm["finalize_job_id"]], small_array_cluster)
    dataset = cfg.parent / "storage" / "datasets" / "text" / "web" / "v1"
    assert (dataset / "manifest.json").is_file(), sorted(Path(slurm["log_dir"]).iterdir())
    local = run_storekit(prepare_args(cfg, corpus, "v2", "--workers", "2"))
    assert local.returncode == 0, local.stderr
    assert dataset_files(dataset) == dataset_files(dataset.parent / "v2")


def test_a_submission_without_init_makes_what_layout_check_wants(slurm_cluster: None, tmp_path: Path) -> None:
    """A Slurm prepare on a tier nobody ran `init` on: the scratch/ its work dir needs and the logs/
    its scripts and element logs go to are made with the layout's modes (1777, 2775), not the umask's,
    and the job's log dir is under logs/ (not scratch/, which is cleaned by age)."""
    root = tmp_path / "shared"
    (root / "storage").mkdir(parents=True)
    cfg = root / "storekit.toml"
    cfg.write_text('default_tier = "shared"\n[tiers.shared]\nurl = "./storage"\nrole = "parallel"\n')
    write_jsonl(root / "corpus" / "a.jsonl", sample_records(40_000))
    old = os.umask(0o022)
    try:
        proc = run_storekit(
            prepare_args(
                cfg, root / "corpus", "v1", "--executor", "slurm", "--slurm-cpus", "1", "--slurm-wait"
            )
        )
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    storage = root / "storage"
    assert doc["status"] == "prepared", doc
    log_dir = Path(doc["slurm"]["log_dir"])
    assert log_dir.parent == storage / "logs" and (log_dir / "array.sbatch").is_file()
    assert oct(os.stat(storage / "scratch").st_mode & 0o7777) == "0o1777"
    assert oct(os.stat(storage / "logs").st_mode & 0o7777) == "0o2775"
    wait_gone([doc["slurm"]["array_job_id"], doc["slurm"]["finalize_job_id"]])
    assert run_storekit(["init", "-q", "--config", str(cfg)]).returncode == 0
    check = run_storekit(["layout", "check", "--json", "--config", str(cfg)])
    assert check.returncode == 0 and json.loads(check.stdout)["clean"] is True, check.stdout
