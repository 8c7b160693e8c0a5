#!/usr/bin/env python3
"""The job layer at cluster scale: 10,000 tasks on 100 nodes, counted in file-system operations.

What a Slurm prepare does to the shared file system, run for real on a synthetic corpus of tiny
documents (one task is ~1 KB of input, so the per-task bookkeeping is what dominates):

  submit     plan the corpus, write plan.json + job.json (the work dir), record the array's
             element -> tasks map in jobs.json (what `prepare --executor slurm` does before sbatch)
  elements   NODES elements one after another, each the real `storekit jobs run-element` code:
             its batch from jobs.json, the records scanned, its tasks run (one stat before each,
             one rename per completion record), then the end-of-element checks: the helping scan
             (what it would run is not: see concurrent_elements) and the all-done probe
  finalize   the last element's inline finalize (its claim, then what `storekit jobs finalize`
             does): every record checked, cross-task dedup, shards, manifest last, work dir removed

Everything runs in one process, once without tracing (wall times: submit must stay under 10 s)
and once under `strace -f -yy`, whose lines are split into phases by marker stats and counted by
kind (opens, stats, renames, directory listings, creates, removes, fsyncs) for paths under the
simulation root only: what the shared file system's metadata server would serve. Python's own
imports (the software install) are counted apart. Two sizes show how each phase grows.

    python3 benchmarks/sim_jobs.py --tasks 1000,10000 --nodes 100 --json-out .work/sim.json

Only sbatch itself is not run (two calls per submission whatever the task count; it touches
Slurm's state directory, not the shared file system).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TOKENIZER = "bundled:anthropic-bpe-65k.tokenizer.json.gz"
FILES = 100  # corpus files: a corpus is many files, and the planner cuts each into tasks
DOC_BYTES = 1000
MARK = "/storekit-sim-phase"  # a stat of MARK/<phase> starts that phase in the trace
PHASES = ("submit", "elements", "finalize")
KINDS = {
    "open": ("open", "openat", "openat2", "creat"),
    "stat": (
        "stat",
        "lstat",
        "newfstatat",
        "statx",
        "access",
        "faccessat",
        "faccessat2",
        "readlink",
        "readlinkat",
    ),
    "rename": ("rename", "renameat", "renameat2"),
    "listing": ("getdents64",),
    "create": ("mkdir", "mkdirat", "link", "linkat", "symlink", "symlinkat"),
    "remove": ("unlink", "unlinkat", "rmdir"),
    "fsync": ("fsync", "fdatasync"),
    "attr": (
        "chmod",
        "fchmod",
        "fchmodat",
        "utimensat",
        "setxattr",
        "fsetxattr",
        "getxattr",
        "fgetxattr",
        "lgetxattr",
        "listxattr",
        "flistxattr",
        "llistxattr",
    ),
}
SYSCALL_KIND = {name: kind for kind, names in KINDS.items() for name in names}
_LINE = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(\w+)\((.*)$")


# -- the corpus ---------------------------------------------------------------------------------------
def make_corpus(folder: Path, tasks: int) -> int:
    """FILES jsonl files of ~DOC_BYTES documents, `tasks` documents in all; returns the task size
    that cuts it into about `tasks` tasks."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(tasks)
    words = [f"w{i}" for i in range(2000)]  # distinct documents: dedup keeps them all
    total = 0
    for f in range(min(FILES, tasks)):
        lines = []
        for d in range(f, tasks, min(FILES, tasks)):
            text = f"document {d}: " + " ".join(rng.choice(words) for _ in range(DOC_BYTES // 6))
            lines.append(json.dumps({"text": text}) + "\n")
        data = "".join(lines).encode()
        (folder / f"part-{f:03d}.jsonl").write_bytes(data)
        total += len(data)
    return max(1, total // tasks)


# -- one run of the three phases (the child, maybe under strace) --------------------------------------
@contextlib.contextmanager
def concurrent_elements() -> Iterator[None]:
    """Elements run here one after another; on a cluster they run at once. So an element's helping
    scans the work dir as it would (that listing is counted) but runs nothing: the other elements'
    unstarted tasks stand for tasks in flight on other nodes. No scancel of the finalize job
    (there is no Slurm job 1002), as no sbatch."""
    import importlib

    from storekit.slurm.helping import free_tasks

    run: Any = importlib.import_module("storekit.slurm.run")
    commands: Any = importlib.import_module("storekit.slurm.commands")

    def scan_only(work: Any, job: Any, executor: Any, workers: int, *rest: Any) -> tuple[int, int]:
        free_tasks(work, work.header().tasks, max(1, workers))
        return 0, 0

    saved = run.help_others, commands.cancel
    run.help_others, commands.cancel = scan_only, lambda ids: None
    try:
        yield
    finally:
        run.help_others, commands.cancel = saved


def mark(phase: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.stat(f"{MARK}/{phase}")


def run_phases(root: Path, corpus: Path, task_bytes: int, nodes: int, element_trace: str) -> dict[str, Any]:
    from storekit import faults
    from storekit.config import load_config
    from storekit.jobdir import Submission
    from storekit.pipeline.inputs import InputFS
    from storekit.pipeline.prepare import make_plan
    from storekit.pipeline.spec import CLI_SOURCE, build_spec
    from storekit.pipeline.staging import copy_tokenizer
    from storekit.slurm.run import run_element

    site = load_config(str(root / "storekit.toml"))
    overrides = {"inputs": (str(corpus),), "tokenizer": TOKENIZER, "task_bytes": task_bytes,
                 "work_dir": str(root / "work"), "workers": 1}  # fmt: skip
    spec = build_spec(CLI_SOURCE, {"name": "sim"}, overrides)
    seconds: dict[str, float] = {}

    mark("submit")
    t0 = time.monotonic()
    plan, location, work, _ = make_plan(spec, site, InputFS(site))
    work.start(plan, meta={"output": location.display, "tier": None, "force": False, "executor": "slurm"})
    copy_tokenizer(plan, work.path)  # elements load this copy (its xxh3 checked)
    n = len(plan.tasks)
    batches = [list(range(n))[e::nodes] for e in range(nodes)]
    array = Submission(executor="slurm", job_id="1001", array=f"0-{nodes - 1}", batches=batches,
                       submitted=time.time(), extra={"role": "array"})  # fmt: skip
    work.record_submission(array)
    work.record_submission(Submission(executor="slurm", job_id="1002", submitted=time.time(),
                                      extra={"role": "finalize", "after": "1001"}))  # fmt: skip
    seconds["submit"] = time.monotonic() - t0
    sizes = {name: (work.path / name).stat().st_size for name in ("plan.json", "job.json", "jobs.json")}

    mark("elements")
    t0 = time.monotonic()
    finalize_started: list[float] = []
    traced = [0.0]

    def finalize_phase() -> None:  # the last element finalizes inline: from here on, finalize's count
        if element_trace:  # one more element process, all its tasks done: what starting one costs
            started = time.monotonic()
            argv = [
                sys.executable,
                "-m",
                "storekit",
                "jobs",
                "run-task",
                str(work.path),
                "--task-ids",
                "0",
                "-q",
            ]
            subprocess.run([*strace_argv(Path(element_trace)), *argv], check=True, stdout=subprocess.DEVNULL)
            traced[0] = time.monotonic() - started
        finalize_started.append(time.monotonic())
        mark("finalize")

    finalized = None
    with concurrent_elements(), faults.at("slurm.inline-finalize", finalize_phase):
        for e in range(nodes):
            env = {"SLURM_ARRAY_JOB_ID": "1001", "SLURM_ARRAY_TASK_ID": str(e), "SLURM_CPUS_PER_TASK": "1"}
            done = run_element(work.path, site, env=env, say=lambda line: None)
            finalized = done.finalized or finalized
    end = time.monotonic()
    if not finalize_started or finalized is None:
        sys.exit("simulation: no element finalized the job")
    seconds["elements"] = finalize_started[0] - t0 - traced[0]
    seconds["finalize"] = end - finalize_started[0]
    mark("end")
    result = finalized
    return {"tasks": n, "nodes": nodes, "seconds": seconds, "work_dir_files": sizes, "result": result}


# -- counting ------------------------------------------------------------------------------------------
def strace_argv(output: Path) -> list[str]:
    return ["strace", "-f", "-yy", "-qq", "-e", f"trace={','.join(SYSCALL_KIND)}", "-o", str(output)]


def count_trace(trace: Path, root: str, phase: str | None = None) -> dict[str, dict[str, Counter[str]]]:
    """phase -> {"shared": kind counts under `root`, "install": the same elsewhere (imports)}."""
    out: dict[str, dict[str, Counter[str]]] = {}
    if phase:
        out[phase] = {"shared": Counter(), "install": Counter()}
    with open(trace, errors="replace") as fh:
        for line in fh:
            m = _LINE.match(line)
            if not m:
                continue  # "<... resumed>" halves and signals: the call was counted when it started
            name, args = m.groups()
            if MARK in args:
                phase = args.split(f"{MARK}/", 1)[1].split('"', 1)[0]
                out.setdefault(phase, {"shared": Counter(), "install": Counter()})
                continue
            kind = SYSCALL_KIND.get(name)
            if phase is None or kind is None:
                continue
            if kind == "stat" and '""' in args and "AT_EMPTY_PATH" in args:
                kind = "fstat"  # of an open file: no path lookup
            if kind == "open" and "O_DIRECTORY" in args:
                kind = "opendir"
            where = "shared" if root in args else "install"
            out[phase][where][kind] += 1
    return out


def run_child(
    root: Path, corpus: Path, task_bytes: int, nodes: int, strace: Path | None, element_trace: bool = False
) -> dict[str, Any]:
    for name in ("work", "storage"):
        shutil.rmtree(root / name, ignore_errors=True)
    out = root / "child.json"
    element = str(root / "element-trace.txt") if element_trace else ""
    args = [str(root), str(corpus), str(task_bytes), str(nodes), str(out), element]
    argv = [sys.executable, __file__, "--child", *args]
    if strace:
        argv = [*strace_argv(strace), *argv]
    subprocess.run(argv, check=True)
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def simulate(root: Path, tasks: int, nodes: int, trace_ops: bool, timed: bool = True) -> dict[str, Any]:
    """One size: a run for wall times (`timed`), one under strace (`trace_ops`)."""
    corpus = root / f"corpus-{tasks}"
    task_bytes = make_corpus(corpus, tasks)
    (root / "storekit.toml").write_text(
        f'default_tier = "shared"\n[tiers.shared]\nurl = "{root / "storage"}"\n'
    )
    counts: dict[str, dict[str, Counter[str]]] = {}
    if timed:
        timed_run = run_child(root, corpus, task_bytes, nodes, None, element_trace=trace_ops)
    if trace_ops:
        trace = root / f"trace-{tasks}.txt"
        traced = run_child(root, corpus, task_bytes, nodes, trace)
        counts = count_trace(trace, str(root))
        if timed:  # the timed run traced one more element process (strace cannot nest)
            counts.update(count_trace(root / "element-trace.txt", str(root), "one element"))
        trace.unlink()
    run = timed_run if timed else traced
    n = run["tasks"]
    plan_bytes = run["work_dir_files"]["plan.json"]
    phases = {}
    for phase in (*PHASES, "one element"):
        shared = counts.get(phase, {}).get("shared", Counter())
        install = counts.get(phase, {}).get("install", Counter())
        total = sum(v for k, v in shared.items() if k != "fstat")
        phases[phase] = {
            "seconds": round(run["seconds"].get(phase, 0.0), 3) if timed else None,
            "shared": dict(sorted(shared.items())),
            "shared_metadata_ops": total,
            "shared_metadata_ops_per_task": round(total / n, 2),
            "install": dict(sorted(install.items())),
        }
    return {
        "tasks": n,
        "nodes": nodes,
        "task_bytes": task_bytes,
        "plan_bytes": plan_bytes,
        "plan_bytes_per_task": round(plan_bytes / n, 1),
        "jobs_json_bytes": run["work_dir_files"]["jobs.json"],
        "phases": phases,
        "tokens": run["result"].get("tokens"),
    }


def table(results: list[dict[str, Any]]) -> str:
    kinds = ["open", "opendir", "stat", "fstat", "rename", "listing", "create", "remove", "fsync", "attr"]
    head = f"{'tasks':>6} {'phase':<11} {'s':>6} " + " ".join(f"{k:>7}" for k in kinds) + f" {'ops/task':>8}"
    rows = [head]
    for r in results:
        if not r["phases"]["one element"]["install"]:  # --no-trace: wall times only
            times = ", ".join(f"{ph} {p['seconds']:.2f} s" for ph, p in r["phases"].items() if ph in PHASES)
            rows.append(f"{r['tasks']:>6} tasks: {times}")
            continue
        for phase, p in r["phases"].items():
            cells = " ".join(f"{p['shared'].get(k, 0):>7}" for k in kinds)
            per_task = "" if phase == "one element" else f"{p['shared_metadata_ops_per_task']:>8.2f}"
            rows.append(f"{r['tasks']:>6} {phase:<11} {p['seconds']:>6.2f} {cells} {per_task}")
        install = r["phases"]["one element"]["install"]
        rows.append(f"{'':>6} one element process also opens {install.get('open', 0)} files and stats "
                    f"{install.get('stat', 0)} paths of the software install (python, numpy...)")  # fmt: skip
        rows.append(f"{'':>6} plan.json {r['plan_bytes']:,} bytes = {r['plan_bytes_per_task']} bytes/task; "
                    f"jobs.json {r['jobs_json_bytes']:,} bytes")  # fmt: skip
    return "\n".join(rows)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        root, corpus, task_bytes, nodes, out, element_trace = sys.argv[2:8]
        doc = run_phases(Path(root), Path(corpus), int(task_bytes), int(nodes), element_trace)
        Path(out).write_text(json.dumps(doc))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="1000,10000", help="task counts, comma-separated")
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--root", help="where to run (default: a temp dir under /dev/shm, else /tmp)")
    ap.add_argument("--no-trace", action="store_true", help="wall times only (no strace run)")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    if shutil.which("strace") is None and not args.no_trace:
        sys.exit("error: strace is needed (apt-get install strace)")
    base = args.root or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
    root = Path(tempfile.mkdtemp(prefix="storekit-sim-", dir=base)).resolve()
    try:
        results = [simulate(root, int(t), args.nodes, not args.no_trace) for t in args.tasks.split(",")]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(table(results))
    first, last = results[0], results[-1]
    for phase in PHASES if not args.no_trace else ():
        a, b = (r["phases"][phase]["shared_metadata_ops"] for r in (first, last))
        print(f"{phase}: metadata ops x{b / max(a, 1):.2f} for tasks x{last['tasks'] / first['tasks']:.2f}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
