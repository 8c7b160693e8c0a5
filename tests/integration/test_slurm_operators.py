"""`prepare dataset --executor slurm` as operators run it, on the real 4-node test Slurm: scancel
cancels, one element's requeue requeues one element, Slurm's own preemption re-runs the element, and
a successful run is COMPLETED in Slurm's accounting (the cluster's jobcomp log) for every job."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_storekit, start_storekit
from tests.integration.test_prepare_slurm import (
    WAIT_S,
    dataset_files,
    make_site,
    prepare_args,
    squeue_ids,
    submit,
    wait_gone,
)

pytestmark = pytest.mark.slurm


def slurm(*args: str) -> str:
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, f"{args}: {proc.stderr}"
    return proc.stdout


def jobcomp(job_id: str) -> list[tuple[str, str]]:
    """(array index or "", JobState) of every end Slurm logged for job or array `job_id`, in order."""
    loc = next(
        ln.split("=", 1)[1].strip() for ln in slurm("scontrol", "show", "config").splitlines()
        if ln.startswith("JobCompLoc")
    )  # fmt: skip
    ends = []
    for line in Path(loc).read_text().splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("ArrayJobId") == job_id or (
            fields.get("JobId") == job_id and not fields.get("ArrayJobId")
        ):
            ends.append((fields.get("ArrayTaskId", ""), fields["JobState"]))
    return ends


def array_wide(verb: str, array: str) -> None:
    """`scontrol hold|release ARRAY`: exit 1 when some elements have finished; the rest say so."""
    done = subprocess.run(["scontrol", verb, array], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 or "No error" in done.stderr, done.stderr


def job_field(job: str, key: str) -> str:
    out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=30)
    text = f" {out.stdout}"
    return text.split(f" {key}=", 1)[1].split()[0] if f" {key}=" in text else ""


def wait_for(what: str, ready: Any, *jobs: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        assert time.monotonic() < deadline, f"{what}: {squeue_ids(list(jobs))}"
        time.sleep(0.2)


def element_log(doc: dict[str, Any], index: int) -> Path:
    return Path(doc["log_dir"]) / f"{doc['array_job_id']}_{index}.out"


# held as it claims its second task, its first done (the task thread holds the element's stop too:
# tasks computed ahead of their commits would otherwise all finish), and once a stop signal made
# the element stop its task threads (the main thread: the signal has arrived)
HELD = "executor.task-claimed@2=pause,executor.stopping=pause"


def release(faults: Path, doc: dict[str, Any]) -> None:
    """Once a stop signal has reached an element: let the held task threads and the stop go on."""
    wait_for("a stop under way", (faults / "executor.stopping.reached").exists, doc["array_job_id"])
    (faults / "executor.stopping.go").touch()
    (faults / "executor.task-claimed.go").touch()


def two_held_elements(tmp_path: Path) -> tuple[Path, Path, Path, dict[str, Any]]:
    """A submission of two elements, each held after its first task (its log says so)."""
    cfg, corpus = make_site(tmp_path)
    faults = tmp_path / "faults"
    faults.mkdir()
    env = {"STOREKIT_FAULTS": HELD, "STOREKIT_FAULT_DIR": str(faults)}
    args = prepare_args(cfg, corpus, "v1", "--executor", "slurm", "--slurm-cpus", "1",
                        "--slurm-tasks-per-element", "11")  # fmt: skip  # 22 tasks: two elements
    args[args.index("--task-size") + 1] = "16KiB"
    proc = run_storekit(args, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)["slurm"]
    assert doc["elements"] == 2, doc
    for i in (0, 1):
        wait_for(f"element {i} held", lambda i=i: "done" in _text(element_log(doc, i)), doc["array_job_id"])
    return cfg, corpus, faults, doc


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_scancel_of_an_element_or_the_array_cancels_and_nothing_requeues(
    slurm_cluster: None, tmp_path: Path
) -> None:
    cfg, _corpus, faults, doc = two_held_elements(tmp_path)
    array, fin = doc["array_job_id"], doc["finalize_job_id"]
    slurm("scancel", f"{array}_0")  # a user cancels one element
    slurm("scancel", array)  # and the whole array
    release(faults, doc)
    wait_gone([array, fin])
    ends = jobcomp(array)
    assert sorted(ends) == [("0", "CANCELLED"), ("1", "CANCELLED")], ends  # each ended once, cancelled
    assert job_field(fin, "JobState") == "CANCELLED"  # its afterok can never hold
    for i in (0, 1):
        log = element_log(doc, i).read_text()
        assert log.count("tasks to run") == 1, log  # never started again
        assert "stopped by SIGTERM" in log and "requeued" not in log, log

    # `jobs rerun` resubmits what is left; right away, status shows the new array's state, not the
    # cancelled elements as failures
    rerun_args = ["jobs", "rerun", "datasets/text/web/v1", "--config", str(cfg), "--json"]
    wrong = run_storekit([*rerun_args, "--slurm-partition", "nosuch"])
    assert wrong.returncode == 2 and "known: cpu, debug, urgent" in wrong.stdout, wrong.stdout
    more = ["--slurm-time", "30", "--slurm-partition", "cpu", "--slurm-mem", "200M"]
    rerun = run_storekit([*rerun_args, *more])
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    again = json.loads(rerun.stdout)
    assert job_field(again["array_job_id"], "Partition") == "cpu"  # what the retry asked for
    assert job_field(again["array_job_id"], "TimeLimit") == "00:30:00"
    assert job_field(again["array_job_id"], "MinMemoryNode") == "200M"
    status = run_storekit(["jobs", "status", "datasets/text/web/v1", "--config", str(cfg), "--json"])
    counts = json.loads(status.stdout)["jobs"][0]["counts"]
    # the cancelled elements' tasks are open again, not failures; the new array may already have run
    # some or all of them by now (Slurm starts it at once on an idle cluster), so they are pending,
    # running or done, never failed
    assert counts["failed"] == 0, counts
    left = counts["pending"] + counts["running"]
    assert left <= again["task_count"] and counts["done"] + left == sum(counts.values()), counts
    wait_gone([again["array_job_id"], again["finalize_job_id"]])
    assert (cfg.parent / "storage" / "datasets" / "text" / "web" / "v1" / "manifest.json").is_file()


@pytest.mark.slow  # ~35 s: a requeued element waits out cred_expire (15 s) before it starts again
def test_usr1_requeues_only_its_own_element_even_the_one_whose_job_id_is_the_arrays(
    slurm_cluster: None, tmp_path: Path
) -> None:
    """The element whose JobId equals the ArrayJobId gets the time-limit notice (USR1): it requeues
    itself as ARRAYID_INDEX; the other element runs on, untouched, and the run completes."""
    cfg, _corpus, faults, doc = two_held_elements(tmp_path)
    array, fin = doc["array_job_id"], doc["finalize_job_id"]
    same = next(i for i in (0, 1) if job_field(f"{array}_{i}", "JobId") == array)
    other = 1 - same
    slurm("scancel", "--signal=USR1", "--batch", f"{array}_{same}")
    release(faults, doc)
    wait_gone([array, fin])
    assert f"requeued job {array}_{same}" in element_log(doc, same).read_text()
    assert element_log(doc, other).read_text().count("tasks to run") == 1  # never killed, never rerun
    ends = jobcomp(array)
    assert [s for i, s in ends if i == str(other)] == ["COMPLETED"], ends
    assert ends[-1] == (str(same), "COMPLETED") and jobcomp(fin) == [("", "COMPLETED")], ends
    dataset = cfg.parent / "storage" / "datasets" / "text" / "web" / "v1"
    assert (dataset / "manifest.json").is_file()


@pytest.mark.parametrize(
    "how", ["preemption", "scontrol requeue", pytest.param("time limit", marks=pytest.mark.slow)]
)
def test_slurm_reruns_a_preempted_requeued_or_timed_element_and_the_dataset_is_the_same(
    slurm_cluster: None, tmp_path: Path, how: str
) -> None:
    """preemption: a job in the higher-priority partition `urgent` takes the element's node; Slurm
    sends TERM and requeues it (PreemptMode=REQUEUE). scontrol requeue: the same by hand. Either way
    the element only stops. time limit (--slurm-time 1): the USR1 notice comes 15 s before it and
    the element requeues itself (ARRAYID_INDEX). Each time the element runs again, skips its finished
    task, and the dataset is byte-identical to a local run's."""
    cfg, corpus = make_site(tmp_path)
    faults = tmp_path / "faults"
    faults.mkdir()
    env = {"STOREKIT_FAULTS": HELD, "STOREKIT_FAULT_DIR": str(faults)}
    limit = ["--slurm-time", "1"] if how == "time limit" else []
    args = prepare_args(cfg, corpus, "v1", "--executor", "slurm", "--slurm-cpus", "1",
                        "--slurm-tasks-per-element", "1000", *limit)  # fmt: skip  # one element
    proc = run_storekit(args, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)["slurm"]
    array, fin = doc["array_job_id"], doc["finalize_job_id"]
    wait_for("element held", lambda: "done" in _text(element_log(doc, 0)), array)
    others = []
    if how == "preemption":
        node = job_field(f"{array}_0", "NodeList")
        others.append(slurm("sbatch", "--parsable", "-p", "urgent", f"--nodelist={node}", "--exclusive",
                            "-o", "/dev/null", "--wrap", "true").strip())  # fmt: skip
    elif how == "scontrol requeue":
        slurm("scontrol", "requeue", f"{array}_0")
    release(faults, doc)  # the requeued run goes on unheld
    wait_gone([array, fin, *others])
    log = element_log(doc, 0).read_text()
    runs = [ln for ln in log.splitlines() if "tasks to run" in ln]
    assert len(runs) == 2 and runs[0] != runs[1], log  # it ran again and skipped its finished task
    if how == "time limit":
        assert (
            f"requeued job {array}_0" in log
            and "#SBATCH --signal=B:USR1@15" in Path(doc["array_script"]).read_text()
        )
    else:
        assert "stopped by SIGTERM" in log and "requeued job" not in log, log  # Slurm requeued it
    assert jobcomp(array)[-1] == ("0", "COMPLETED") and jobcomp(fin) == [("", "COMPLETED")]
    dataset = cfg.parent / "storage" / "datasets" / "text" / "web" / "v1"
    local = run_storekit(prepare_args(cfg, corpus, "v2", "--workers", "1"))
    assert local.returncode == 0, local.stderr
    assert dataset_files(dataset) == dataset_files(dataset.parent / "v2")


@pytest.mark.slow  # ~30 s: a preemption and a rerun
def test_with_no_requeue_a_preempted_element_ends_preempted_and_jobs_rerun_completes(
    slurm_cluster: None, tmp_path: Path
) -> None:
    """--slurm-no-requeue: the script asks for no time-limit notice, Slurm's preemption ends the
    element PREEMPTED and nothing requeues it (Slurm refuses `scontrol requeue` for such a job);
    `jobs rerun` resubmits what is left and the dataset is byte-identical to a local run's."""
    cfg, corpus = make_site(tmp_path)
    faults = tmp_path / "faults"
    faults.mkdir()
    env = {"STOREKIT_FAULTS": HELD, "STOREKIT_FAULT_DIR": str(faults)}
    args = prepare_args(cfg, corpus, "v1", "--executor", "slurm", "--slurm-cpus", "1", "--slurm-no-requeue",
                        "--slurm-tasks-per-element", "1000", "--slurm-time", "10")  # fmt: skip
    proc = run_storekit(args, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)["slurm"]
    array, fin = doc["array_job_id"], doc["finalize_job_id"]
    assert "--signal" not in Path(doc["array_script"]).read_text()
    wait_for("element held", lambda: "done" in _text(element_log(doc, 0)), array)
    requeue = subprocess.run(
        ["scontrol", "requeue", f"{array}_0"], capture_output=True, text=True, timeout=30
    )
    assert requeue.returncode != 0 and "disabled" in requeue.stderr, requeue.stderr  # what USR1 would ask
    node = job_field(f"{array}_0", "NodeList")
    urgent = slurm("sbatch", "--parsable", "-p", "urgent", f"--nodelist={node}", "--exclusive",
                   "-o", "/dev/null", "--wrap", "true").strip()  # fmt: skip
    release(faults, doc)
    wait_gone([array, fin, urgent])
    assert jobcomp(array) == [("0", "PREEMPTED")] and job_field(fin, "JobState") == "CANCELLED"
    log = element_log(doc, 0).read_text()
    assert log.count("tasks to run") == 1 and "stopped by SIGTERM" in log and "requeued" not in log, log
    rerun = run_storekit(["jobs", "rerun", "datasets/text/web/v1", "--config", str(cfg), "--json"])
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    again = json.loads(rerun.stdout)
    wait_gone([again["array_job_id"], again["finalize_job_id"]])
    assert jobcomp(again["array_job_id"]) == [("0", "COMPLETED")]
    dataset = cfg.parent / "storage" / "datasets" / "text" / "web" / "v1"
    local = run_storekit(prepare_args(cfg, corpus, "v2", "--workers", "1"))
    assert local.returncode == 0, local.stderr
    assert dataset_files(dataset) == dataset_files(dataset.parent / "v2")


@pytest.mark.slow
def test_more_elements_than_run_at_once_end_completed_every_one(slurm_cluster: None, tmp_path: Path) -> None:
    """32+ elements, 2 at a time (%2): the first ones do every task (helping) and finalize; the
    elements Slurm starts afterwards have nothing to do and exit 0, the finalize job too. While the
    first two are held, `jobs status` shows the rest pending for Slurm's JobArrayTaskLimit; once
    published, it says so for the dataset and for the work dir the submission printed."""
    cfg, corpus = make_site(tmp_path)
    faults = tmp_path / "faults"
    faults.mkdir()
    held = "slurm.element-task-done=pause,slurm.inline-finalize=pause"
    env = {"STOREKIT_FAULTS": held, "STOREKIT_FAULT_DIR": str(faults)}
    args = prepare_args(cfg, corpus, "v1", "--executor", "slurm", "--slurm-cpus", "1",
                        "--slurm-tasks-per-element", "1", "--slurm-max-concurrent", "2")  # fmt: skip
    args[args.index("--task-size") + 1] = "8KiB"
    proc = run_storekit(args, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    submitted = json.loads(proc.stdout)
    doc = submitted["slurm"]
    assert doc["elements"] >= 32, doc
    array, fin = doc["array_job_id"], doc["finalize_job_id"]
    wait_for("held", (faults / "slurm.element-task-done.reached").exists, array)
    status = run_storekit(["jobs", "status", "datasets/text/web/v1", "--config", str(cfg), "--json"])
    assert status.returncode == 0, status.stderr
    view = json.loads(status.stdout)["jobs"][0]["slurm"]
    assert view["pending_reasons"].get("JobArrayTaskLimit", 0) >= doc["elements"] - 2, view
    (faults / "slurm.element-task-done.go").touch()
    # the first elements did every task (helping); one finalizes: the elements still pending wait
    # (held) until it has published, then start with nothing to do
    wait_for("finalizing", (faults / "slurm.inline-finalize.reached").exists, array)
    array_wide("hold", array)
    (faults / "slurm.inline-finalize.go").touch()
    work = Path(submitted["plan"]["work_dir"])
    wait_for("published", lambda: not work.exists(), array)
    array_wide("release", array)
    wait_gone([array, fin])
    ends = jobcomp(array)
    assert len(ends) == doc["elements"] and {s for _, s in ends} == {"COMPLETED"}, ends
    assert jobcomp(fin) == [("", "COMPLETED")]
    logs = [element_log(doc, i).read_text() for i in range(doc["elements"])]
    late = [log for log in logs if "nothing to do" in log]
    assert late and all(log.count("\n") == 1 for log in late), late[:2]  # one line each
    assert "already prepared" in (Path(doc["log_dir"]) / f"{fin}.out").read_text()
    dataset = cfg.parent / "storage" / "datasets" / "text" / "web" / "v1"
    assert run_storekit(["dataset", "verify", "datasets/text/web/v1", "--config", str(cfg)]).returncode == 0
    for target in ("datasets/text/web/v1", submitted["plan"]["work_dir"]):
        status = run_storekit(["jobs", "status", target, "--config", str(cfg), "--json"])
        assert status.returncode == 0, status.stdout + status.stderr
        published = json.loads(status.stdout)["published"]
        assert published["state"] == "published" and published["dataset"].endswith("datasets/text/web/v1")
        assert published["jobs"] == [array, fin] and published["finalized_by"].startswith(f"element {array}_")
    human = run_storekit(["jobs", "status", "datasets/text/web/v1", "--config", str(cfg)])
    assert human.returncode == 0 and human.stdout.startswith(f"published: {dataset} at "), human.stdout


def partition_cpus(partition: str = "debug") -> int:
    """The CPUs of the partition's nodes, all together (sinfo %C: allocated/idle/other/total)."""
    return int(slurm("sinfo", "-h", "-p", partition, "-o", "%C").split("/")[-1])


@pytest.mark.slow  # ~1 min: 32+ element starts, a local run to compare
def test_a_full_run_of_more_elements_than_cpus_is_completed_everywhere(
    slurm_cluster: None, tmp_path: Path
) -> None:
    """No %N and nothing held: 32+ one-CPU elements on a cluster with fewer CPUs, Slurm starting each
    as a CPU frees up (the late ones find their tasks done by helpers, or the job published). Every
    element and the finalize job end COMPLETED in the jobcomp log, and the dataset is byte-identical
    to a local run's."""
    cfg, corpus = make_site(tmp_path)
    args = prepare_args(cfg, corpus, "v1", "--executor", "slurm", "--slurm-cpus", "1",
                        "--slurm-tasks-per-element", "1")  # fmt: skip
    args[args.index("--task-size") + 1] = "8KiB"
    doc = submit(args)["slurm"]
    assert doc["elements"] >= 32 and doc["elements"] > partition_cpus(), doc
    array, fin = doc["array_job_id"], doc["finalize_job_id"]
    wait_gone([array, fin])
    ends = jobcomp(array)
    assert len(ends) == doc["elements"] and {s for _, s in ends} == {"COMPLETED"}, ends
    assert jobcomp(fin) == [("", "COMPLETED")]
    dataset = cfg.parent / "storage" / "datasets" / "text" / "web" / "v1"
    local_args = prepare_args(cfg, corpus, "v2", "--workers", "1")
    local_args[local_args.index("--task-size") + 1] = "8KiB"  # the same plan
    local = run_storekit(local_args)
    assert local.returncode == 0, local.stderr
    assert dataset_files(dataset) == dataset_files(dataset.parent / "v2")


def test_a_bad_input_fails_only_the_element_that_owns_it_named_with_its_log(
    slurm_cluster: None, tmp_path: Path
) -> None:
    """Two elements run at a time and help with the others' tasks, highest first: they reach the
    bad input's task (the last) before its owner starts. The helper hands it back and ends
    COMPLETED; the owner fails it: one FAILED element, and the record names the owner's log."""
    cfg, corpus = make_site(tmp_path)
    bad = corpus / "c.jsonl"
    bad.write_bytes(b'{"text": "def broken(" \n')  # line 1: malformed JSON
    args = prepare_args(cfg, corpus, "v1", "--executor", "slurm", "--slurm-cpus", "1", "--on-error", "fail",
                        "--slurm-tasks-per-element", "1", "--slurm-max-concurrent", "2")  # fmt: skip
    doc = submit(args)["slurm"]
    array, fin = doc["array_job_id"], doc["finalize_job_id"]
    wait_gone([array, fin])
    ends = jobcomp(array)
    failed = [i for i, s in ends if s != "COMPLETED"]
    assert len(failed) == 1 and len(ends) == doc["elements"], ends
    owner = doc["elements"] - 1  # the last input's task is the last element's
    assert failed == [str(owner)], ends
    logs = [element_log(doc, i).read_text() for i in range(doc["elements"])]
    assert any("failed while helping" in log for log in logs), logs
    status = run_storekit(["jobs", "status", "datasets/text/web/v1", "--config", str(cfg), "--json"])
    assert status.returncode == 0, status.stderr
    records = json.loads(status.stdout)["jobs"][0]["failed"]
    assert len(records) == 1 and records[0]["log"] == str(element_log(doc, owner)), records
    assert str(bad) in records[0]["error"] and str(bad) in element_log(doc, owner).read_text()


def test_element_and_finalize_logs_are_group_readable_under_a_private_umask(
    slurm_cluster: None, tmp_path: Path
) -> None:
    """A submitter whose umask is 077: Slurm makes each %A_%a.out and %j.out 0600; the jobs open
    them to the group (0640), as the scripts beside them, so teammates can read the logs."""
    cfg, corpus = make_site(tmp_path)
    args = prepare_args(cfg, corpus, "v1", "--executor", "slurm", "--slurm-cpus", "1", "--slurm-wait",
                        "--slurm-tasks-per-element", "1000")  # fmt: skip
    proc = start_storekit(args, umask=0o077)
    out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, out + err
    doc = json.loads(out)["slurm"]
    wait_gone([doc["array_job_id"], doc["finalize_job_id"]])  # the finalize job's own end
    logs = sorted(Path(doc["log_dir"]).glob("*.out"))
    assert len(logs) == doc["elements"] + 1, logs
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in logs} == {p.name: "0o640" for p in logs}


def test_operator_options_logs_cpus_names_and_early_errors(slurm_cluster: None, tmp_path: Path) -> None:
    """Wrong options fail before anything is written (exit 2); a run with its work dir outside the
    tier keeps its scripts and logs in the tier's logs/ (group-readable), each element runs as many
    workers as Slurm gave it CPUs, a credential-like variable never reaches Slurm's stored job
    environment, and the jobs' names differ in the 8 characters squeue shows."""
    cfg, corpus = make_site(tmp_path)
    scratch = cfg.parent / "storage" / "scratch"
    elsewhere = tmp_path / "work"  # a --work-dir outside any tier: finalize removes the work dir
    base = prepare_args(cfg, corpus, "v1", "--executor", "slurm", "--work-dir", str(elsewhere))
    for extra, said in (
        (["--slurm-partition", "nosuch"], "no such partition on this cluster (known: cpu, debug, urgent)"),
        (["--slurm-extra", "--array=0-1"], "storekit sets --array itself"),
        (["--slurm-extra", "-o/tmp/x.out"], "storekit sets -o itself"),
        (["--slurm-dependency", "after ok"], "expected TYPE:JOBID"),
    ):
        proc = run_storekit([*base, *extra])
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert said in json.loads(proc.stdout)["error"]["message"], proc.stdout
        assert not elsewhere.exists() and not any(scratch.iterdir())  # nothing written
    refused = run_storekit([*base, "--slurm-extra", "--constraint=nosuchfeature"])  # sbatch says no
    assert refused.returncode == 2 and "Invalid feature" in refused.stdout, refused.stdout
    assert not elsewhere.exists() or not any(elsewhere.iterdir())  # no empty work dir left behind
    dry = run_storekit([*base, "--dry-run", "--slurm-mem-per-cpu", "1G", "--slurm-no-requeue",
                        "--slurm-dependency", "afterok:1", "--slurm-job-name", "tok"])  # fmt: skip
    scripts = json.loads(dry.stdout)["slurm"]["sbatch"]
    for line in ("--mem-per-cpu=1G", "--no-requeue", "--dependency=afterok:1", "--job-name=tok"):
        assert f"#SBATCH {line}\n" in scripts["array"], scripts["array"]
    assert "--job-name=fin-tok\n" in scripts["finalize"] and "--dependency" not in scripts["finalize"]
    assert "--signal" not in scripts["array"]  # no requeue: no notice, the time limit ends it TIMEOUT

    env = {"MY_PASS": "hunter2-not-for-slurm"}
    proc = run_storekit([*base, "--slurm-extra", "--comment=my job", "--slurm-wait"], env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)["slurm"]
    logs = Path(doc["log_dir"])
    assert logs.parent == cfg.parent / "storage" / "logs" and not elsewhere.joinpath(logs.name).exists()
    assert logs.stat().st_mode & 0o777 == 0o750 and Path(doc["array_script"]).stat().st_mode & 0o777 == 0o640
    array, fin = doc["array_job_id"], doc["finalize_job_id"]
    assert job_field(f"{array}_0", "Comment") == "my"  # scontrol -o prints "Comment=my job"
    names = {job_field(f"{array}_0", "JobName")[:8], job_field(fin, "JobName")[:8]}
    assert names == {"web-v1", "fin-web-"}, names
    state = next(
        ln.split("=", 1)[1].strip() for ln in slurm("scontrol", "show", "config").splitlines()
        if ln.startswith("StateSaveLocation")
    )  # fmt: skip
    stored = list(Path(state).glob(f"hash.*/job.{fin}/environment"))
    assert stored and all(b"hunter2" not in p.read_bytes() for p in stored)
    assert b"MY_PASS" not in stored[0].read_bytes() and b"PATH=" in stored[0].read_bytes()
    wait_gone([array, fin])
    element_logs = sorted(logs.glob(f"{array}_*.out"))
    assert len(element_logs) == doc["elements"]
    # no --slurm-cpus: one CPU allocated per element, one worker (the node has more cores)
    assert all(
        ", 1 workers, on sk-node" in p.read_text() for p in element_logs if "tasks to run" in p.read_text()
    )
