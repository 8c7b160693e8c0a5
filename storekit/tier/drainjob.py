"""A drain on every node as a job of the job layer (kind "tier-drain"): one task per node.

`storekit tier --drain --executor slurm --nodes N` starts `storekit tier --drain` once on each of N
nodes as one job step of the `slurm` executor (storekit/slurm/step.py: `srun --ntasks-per-node=1`,
in the caller's allocation or in one srun asks for). Each node drains its own burst tier exactly as
the command run there does (same planner, mover, unit journals, drain lease, node-local plan);
task i is the step's process i ($SLURM_PROCID), and it writes its own record into the job's work
dir on the shared tier's scratch/ (`storekit-tier-drain-nodes-<time>-<random>`):

    job.json, plan.json   kind `tier-drain`, N tasks; the request (drain what, which tier, nodes)
    tasks/00000i/done.json   node i drained: its node name, Slurm job and step, and the report its
                             `--json` would print (plan, every unit's result, exit code 0)
    failed/00000i.json       node i did not: the error naming the node, its exit code, state
                             "failed" or "cancelled" (Ctrl-C, SIGTERM: 130), its report if it had one
    jobs.json                the step: executor slurm, the Slurm job id, role "step", step id, nodes

Why a file per node on the shared tier and not each process's stdout: the record must outlive the
launching command (a login node's ssh session may drop; `jobs status` reads the files alone), the
per-task done/failed records are the job layer's own (their states are what `jobs status` counts),
and srun interleaves the output of N processes. The shared tier is the drain's destination, so every
node that can drain can write there. The launcher writes what no node could: a failure record for a
node that left none (killed, never started, the step cancelled).

A drain is run again, never resumed as a job: `jobs run-task/rerun` refuse the kind; the same
command again drains what is left, each node's unit journals finishing interrupted moves.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from storekit import faults
from storekit.config import SiteConfig
from storekit.errors import ExitCode, Interrupted, UsageError, failure_of
from storekit.jobdir import DONE, JobDir, Submission, remove_path
from storekit.slurm.step import Step, StepInfo
from storekit.tier.job import shared_scratch
from storekit.tier.kinds import DRAIN_DIR_PREFIX, DRAIN_KIND
from storekit.trusted_dirs import anchor_for

EXECUTOR = "slurm"
POLL_S = 1.0  # how often the launcher asks squeue for the step until it has seen it


class DrainRecord:
    """The launcher's side of the job record: made before the step starts, completed after."""

    def __init__(self, work: JobDir, nodes: int) -> None:
        self.work = work
        self.nodes = nodes

    @classmethod
    def create(cls, site: SiteConfig, nodes: int, request: dict[str, Any]) -> DrainRecord:
        scratch = shared_scratch(site)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        path = scratch / f"{DRAIN_DIR_PREFIX}{stamp}-{secrets.token_hex(3)}"
        roots = [t.local_root for t in site.tiers.values() if t.local_root]
        work = JobDir(path, anchor=anchor_for(path, roots))
        work.create()
        plan = {"action": "drain", "nodes": nodes, "request": request}
        meta = {"action": "drain", "output": "tier drain", "nodes": nodes, "executor": EXECUTOR}
        work.write_plan(json.dumps(plan, sort_keys=True).encode(), kind=DRAIN_KIND, tasks=nodes, meta=meta)
        return cls(work, nodes)

    @property
    def path(self) -> Path:
        return self.work.path

    def step_seen(self, step: StepInfo) -> None:
        """Slurm runs the step: its job and step id and nodes in jobs.json, once."""
        if any(s.extra.get("role") == "step" for s in self.work.submissions()):
            return
        extra = {"role": "step", "step_id": step.step_id, "nodes": step.nodes}
        sub = Submission(executor=EXECUTOR, job_id=step.job_id, submitted=time.time(), extra=extra)
        self.work.record_submission(sub)

    def run(self, step: Step) -> list[dict[str, Any]]:
        """Wait for the step; every node's outcome, in task order. Ctrl-C (or SIGTERM) stops the
        step: the nodes' drains are interrupted (each records itself cancelled, its journals kept),
        a node that left no record is recorded cancelled, and Interrupted (exit 130) is raised."""
        try:
            while True:
                faults.point("tier.drain-step-wait")
                try:
                    step.proc.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    if step.seen is None:
                        step.info()
        except KeyboardInterrupt:
            step.end(wait_s=0.0)  # srun passes the stop on to each node's drain, then ends
            self._complete(step, "interrupted: the step was cancelled", ExitCode.INTERRUPTED)
            where = f" (Slurm job {step.seen.job_id})" if step.seen else ""
            raise Interrupted(
                f"interrupted: the drain step{where} is cancelled; record: {self.path}",
                hint="run the same command again: each node resumes its moves from their journals",
            ) from None
        step.end()
        self._complete(step, f"no record from its drain ({step.failure()})", ExitCode.ERROR)
        return node_outcomes(self.work, self.nodes)

    def _complete(self, step: Step, why: str, code: int) -> None:
        """A failure record for each node that left none; the step in jobs.json if squeue never
        showed it (a short drain), from what the nodes recorded of it."""
        outcomes = node_outcomes(self.work, self.nodes)
        names = step.seen.nodes if step.seen is not None else []
        for task, outcome in enumerate(outcomes):
            if outcome["state"] in ("pending", "running"):
                node = names[task] if task < len(names) else "?"
                state = "cancelled" if code == ExitCode.INTERRUPTED else "failed"
                self.work.record_failure(
                    task, f"node {node}: {why}", exit_code=int(code), extra={"node": node, "state": state}
                )
        if step.seen is None:
            slurm = next((o["slurm"] for o in outcomes if o.get("slurm", {}).get("job_id")), None)
            if slurm is not None:
                nodes = [str(o["node"]) for o in outcomes if o.get("node")]
                self.step_seen(StepInfo(str(slurm["step_id"]), nodes))


class NodeRecord:
    """A node's side: the drain run here is task $SLURM_PROCID of the job at `path`."""

    def __init__(self, path: str) -> None:
        self.work = JobDir(Path(path))
        header = self.work.header()
        if header.kind != DRAIN_KIND:
            raise UsageError(f"--node-record {path}: a {header.kind} job, not a drain on every node")
        procid = os.environ.get("SLURM_PROCID", "")
        if not procid.isdigit() or int(procid) >= header.tasks:
            raise UsageError(
                f"--node-record: run by `storekit tier --drain --executor slurm` in its job step "
                f"($SLURM_PROCID {procid or 'unset'}, {header.tasks} tasks)"
            )
        self.index = int(procid)
        self.node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        job = os.environ.get("SLURM_JOB_ID", "")
        self.slurm = {"job_id": job, "step_id": f"{job}.{os.environ.get('SLURM_STEP_ID', '?')}"}
        self.written = False

    def drained(self, report: dict[str, Any], code: int, error: str) -> None:
        """The node's drain ended with `report` (what its --json prints): done when `code` is 0,
        else failed naming the node and the first unit that failed (`error`)."""
        if code:
            self._failure(f"node {self.node}: {error}", code, "failed", report)
            return
        record = {"task": self.index, "parts": {}, "node": self.node, "slurm": self.slurm, "report": report}
        tmp = self.work.new_task_dir(self.index)
        try:
            (tmp / DONE).write_text(json.dumps(record, default=str))
            self.work.commit_task(tmp, self.index)
        except BaseException:
            remove_path(tmp)
            raise
        self.work.clear_failure(self.index)
        self.written = True

    def stopped(self, exc: BaseException) -> None:
        """The drain stopped before its report: failed (the error) or cancelled (exit 130)."""
        if self.written:
            return
        message, code = failure_of(exc)
        state = "cancelled" if code == ExitCode.INTERRUPTED else "failed"
        with contextlib.suppress(Exception):  # the drain's own error is what its log must show
            self._failure(f"node {self.node}: {message}", code, state, None)

    def _failure(self, error: str, code: int, state: str, report: dict[str, Any] | None) -> None:
        plain = json.loads(json.dumps(report, default=str))  # what a record can hold
        extra = {"node": self.node, "state": state, "slurm": self.slurm, "report": plain}
        self.work.record_failure(self.index, error, exit_code=code, extra=extra)
        self.written = True


def node_outcomes(work: JobDir, tasks: int) -> list[dict[str, Any]]:
    """Each node's outcome from its record: node, state (done, failed, cancelled, running or
    pending while it has none), exit code, units moved/skipped/failed, bytes moved, its report."""
    scan = work.scan()
    flying = {f.index for f in scan.in_flight}
    out = []
    for task in range(tasks):
        doc: dict[str, Any] = {}
        code: int | None
        error: str | None
        if task in scan.done:
            doc = work.read_done(task)
            state, code, error = "done", 0, None
        elif task in scan.failed and (failure := work.read_failure(task)) is not None:
            doc = failure
            state, code, error = str(doc.get("state") or "failed"), int(doc["exit_code"]), str(doc["error"])
        else:
            state, code, error = ("running" if task in flying else "pending"), None, None
        report = doc.get("report") or {}
        results = list(report.get("results") or [])
        count = {s: sum(1 for r in results if r.get("status") == s) for s in ("done", "skipped", "failed")}
        moved = sum(int(r.get("bytes") or 0) for r in results if r.get("status") == "done")
        out.append(
            {
                "task": task,
                "node": doc.get("node"),
                "state": state,
                "exit_code": code,
                **({"error": error} if error else {}),
                "units_moved": count["done"],
                "units_skipped": count["skipped"],
                "units_failed": count["failed"],
                "bytes_moved": moved,
                "slurm": doc.get("slurm") or {},
                "report": report or None,
            }
        )
    return out


def job_exit_code(outcomes: Sequence[dict[str, Any]]) -> int | None:
    """The job's exit code: the first failed node's (task order), 0 when all drained, None while
    a node has no record."""
    if any(o["exit_code"] is None for o in outcomes):
        return None
    return next((int(o["exit_code"]) for o in outcomes if o["exit_code"]), 0)


def result_of(work: JobDir) -> dict[str, Any]:
    """For `jobs status`: each node's outcome (without its whole report) and the job's exit code."""
    outcomes = node_outcomes(work, work.header().tasks)
    nodes = [{k: v for k, v in o.items() if k != "report"} for o in outcomes]
    return {"nodes": nodes, "exit_code": job_exit_code(outcomes)}


def load(path: Path, site: SiteConfig) -> Any:
    """A drain on every node is not run again by the job commands: the drain is."""
    raise UsageError(
        f"{path} is a drain on every node: it is not resumed or run again by task",
        hint="run `storekit tier --drain --executor slurm` again: each node finishes its "
        "interrupted moves from their journals",
    )
