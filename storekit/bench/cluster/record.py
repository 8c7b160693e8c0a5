"""bench io across nodes as a job of the job layer: a work dir and records as prepare's have
(storekit/jobdir.py), so `storekit jobs status` shows the run, its Slurm job and how it ended.

A benchmark is one task (task 0: the whole run on every node) that is run again, never resumed:

    job.json, plan.json        kind `bench-io`, one task; the bench plan; meta: target, nodes, run id
    tasks/.000000.storekit-tmp-PID…   while the run goes on (`jobs status`: running, pid N on HOST)
    jobs.json                  the job step, once Slurm runs it: executor slurm, the Slurm job id,
                               role "step", its step id and nodes
    tasks/000000/              the run succeeded: result.json (the document `bench io --json`
                               prints) and done.json (its digest and a summary)
    failed/000000.json         the run failed (the error, naming the node, and its exit code) or was
                               cancelled (Ctrl-C, SIGTERM: exit 130, state "cancelled")

The work dir is made in the user's state dir ($STOREKIT_STATE_DIR, else
$XDG_STATE_HOME/storekit, else ~/.local/state/storekit) under jobs/, not on the benchmarked
filesystem: a bench run leaves nothing on its target, and `jobs status` looks there too.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from storekit.bench.kinds import BENCH_IO, WORK_DIR_PREFIX
from storekit.errors import ExitCode, UsageError, failure_of
from storekit.jobdir import JobDir, Submission, part_digest
from storekit.slurm.step import StepInfo
from storekit.trusted_dirs import state_dir

KIND = BENCH_IO

RESULT = "result.json"


def records_root() -> Path | None:
    """Where bench io's job records go: jobs/ of the user's state dir (None: no home)."""
    folder = state_dir()
    return None if folder is None else folder / "jobs"


class BenchRecord:
    """The job record of one bench io run across nodes, written by its coordinator only."""

    def __init__(self, path: Path, executor: str) -> None:
        self.work = JobDir(path)
        self.tmp: Path | None = None
        self.executor = executor  # the one whose job step runs the agents (jobs.json)

    @classmethod
    def start(cls, plan: dict[str, Any], meta: dict[str, Any], executor: str) -> BenchRecord | None:
        """A new record for the run `meta["run_id"]`, shown running; None where the user has no
        state dir to keep it in."""
        root = records_root()
        if root is None:
            return None
        record = cls(root / f"{WORK_DIR_PREFIX}{meta['run_id']}", executor)
        record.work.create()
        data = json.dumps(plan, sort_keys=True).encode()
        record.work.write_plan(data, kind=KIND, tasks=1, meta={"executor": executor, **meta})
        record.tmp = record.work.new_task_dir(0)
        return record

    @property
    def path(self) -> Path:
        return self.work.path

    def step_seen(self, step: StepInfo) -> None:
        """Slurm runs the agents' step: its job id is the run's, in jobs.json."""
        extra = {"role": "step", "step_id": step.step_id, "nodes": step.nodes}
        self.work.record_submission(
            Submission(executor=self.executor, job_id=step.job_id, submitted=time.time(), extra=extra)
        )

    def succeeded(self, doc: dict[str, Any]) -> None:
        """The run's document as task 0's result; the record reads done."""
        assert self.tmp is not None
        result = self.tmp / RESULT
        result.write_bytes(json.dumps(doc, indent=1).encode())
        digest = part_digest(result)
        done = {"parts": {RESULT: [digest.size, digest.xxh3_128]}, "summary": summary(doc)}
        (self.tmp / "done.json").write_bytes(json.dumps(done, indent=1).encode())
        self.work.commit_task(self.tmp, 0)
        self.tmp = None

    def ended(self, exc: BaseException) -> None:
        """The run stopped: failed (the error, which names the node) or cancelled (exit 130)."""
        message, code = failure_of(exc)
        state = "cancelled" if code == ExitCode.INTERRUPTED else "failed"
        self.work.record_failure(0, message, exit_code=code, extra={"state": state})
        self.work.remove_temps(own=True)
        self.tmp = None


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    """What `jobs status` shows of a finished run: its nodes, time and each phase's median rate."""
    phases = []
    for point in doc.get("results", []):
        for ph in point.get("phases", []):
            rates = ph.get("summary") or {}
            phases.append(
                {
                    "pattern": point.get("pattern"),
                    "label": point.get("label"),
                    "phase": ph.get("phase"),
                    "bandwidth_bytes_per_s": rates.get("bandwidth_bytes_per_s"),
                    "ops_per_s": rates.get("ops_per_s"),
                }
            )
    nodes = [n.get("node") for n in doc.get("environment", {}).get("nodes", [])]
    return {
        "run_id": doc.get("run_id"),
        "duration_s": doc.get("duration_s"),
        "nodes": nodes,
        "phases": phases,
    }


def result_of(work: JobDir) -> dict[str, Any] | None:
    """For `jobs status`: the finished run's summary and where its whole document is."""
    if not work.is_done(0):
        return None
    done = work.read_done(0)
    return {"document": str(work.task_dir(0) / RESULT), **dict(done.get("summary") or {})}


def load(path: Path, site: Any) -> Any:
    """A bench io job is not run again by the job commands: the benchmark is."""
    raise UsageError(
        f"{path} is a bench io run: it is not resumed or run again by task",
        hint="run `storekit bench io` again",
    )
