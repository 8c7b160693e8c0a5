#!/usr/bin/env python3
"""`prepare dataset --executor slurm` on 1, 2 and 4 nodes vs the local executor with the same CPUs.

Target (issue 12): with the same total CPUs, the Slurm run reaches at least 0.9x the local executor's
tokens/s, end to end: each run is timed from the command's start to its return, the Slurm one with
`--slurm-wait` (it returns once finalize has published the dataset and removed the work dir, as a
local run does before returning; queueing and launch included). Each Slurm element gets one
CPU and a whole node (`--exclusive`), so N nodes run N elements at once; the local run gets
`--workers N`. Nodes beyond N are excluded (`--exclude`). Runs alternate local / Slurm per node
count; each output is checked byte-identical (sha256 of every shard) to the first local one.

First it measures the dispatch overhead per array element: a small corpus as ELEMENTS one-task
elements on one node, one after another, minus a local run of the same plan on one worker, divided
by ELEMENTS: Slurm scheduling, process start, imports, plan and tokenizer load, per element.

On a cluster emulated on one host (several slurmd, one per node name), every node shares the same
cores: N nodes x 1 CPU beyond the host's cores oversubscribes it exactly as `--workers N` does, so
those rows measure the overhead under contention, not scaling.

    python3 benchmarks/bench_prepare_slurm.py --nodes 1,2,4 --repeat 1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _measure import HostCpu, byte_compile, host_cpu

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORK = HERE / ".work"
CORPUS = WORK / "corpus" / "corpus-120mb.jsonl"
TOKENIZER = WORK / "tokenizer" / "tokenizer.json"
ELEMENTS_PER_NODE = [1]  # --elements-per-node: more balance the load, each costs a dispatch
WAIT_S = 1800


TREE = [REPO]  # the storekit checkout that runs (--tree)


def storekit(args: list[str], config: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(TREE[0])}
    argv = [sys.executable, "-m", "storekit", *args, "--config", str(config), "--json", "-q"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=TREE[0])
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def cpu_delta(before: HostCpu) -> dict[str, float]:
    """The host's busy and idle CPU-s since `before`: a run's extra work (every process counts:
    Slurm's daemons, the elements) apart from cores left idle."""
    now = host_cpu()
    return {
        "host_busy_cpu_s": round(now.busy - before.busy, 2),
        "host_idle_cpu_s": round(now.idle - before.idle, 2),
    }


def sinfo_nodes() -> list[str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, check=True)
    return sorted(set(out.stdout.split()))


def queued(job_ids: list[str]) -> bool:
    out = subprocess.run(
        ["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i"], capture_output=True, text=True
    )
    return bool(out.stdout.strip())


def shards_digest(dataset: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(dataset.iterdir()):
        if path.name != "manifest.json":
            h.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


class Bench:
    def __init__(self, root: Path, corpus: Path, tokenizer: Path, task_size: str | None) -> None:
        self.root = root
        self.corpus = corpus
        self.tokenizer = tokenizer
        self.task_size = task_size
        self.config = root / "storekit.toml"
        (root / "jobs" / "logs").mkdir(parents=True)
        self.config.write_text(f'default_tier = "shared"\n[tiers.shared]\nurl = "{root / "storage"}"\n')
        self.runs = 0
        self.tasks = 0
        self.all_nodes = sinfo_nodes()

    def args(self, version: str, corpus: Path, task_size: str | None) -> list[str]:
        args = [
            "prepare",
            "dataset",
            "-i",
            str(corpus),
            "--tokenizer",
            str(self.tokenizer),
            "--name",
            "bench",
            "--version",
            version,
            "--work-dir",
            str(self.root / "jobs" / "scratch"),  # logs/ beside scratch/: element logs outlive the job
        ]
        return [*args, "--task-size", task_size] if task_size else args

    def dataset(self, version: str) -> Path:
        return self.root / "storage" / "datasets" / "text" / "bench" / version

    def local(self, workers: int, corpus: Path | None = None, task_size: str | None = None) -> dict[str, Any]:
        self.runs += 1
        version = f"local{self.runs}"
        cpu0, started = host_cpu(), time.monotonic()
        doc = storekit(
            [
                *self.args(version, corpus or self.corpus, task_size or self.task_size),
                "--workers",
                str(workers),
            ],
            self.config,
        )
        seconds, cpu = time.monotonic() - started, cpu_delta(cpu0)
        t = doc.get("timings", {})
        info = {"executor": "local", "workers": workers, "tasks_s": t.get("tokenize_seconds"), **cpu}
        return self._done(version, seconds, {**info, "finalize_s": t.get("finalize_seconds")})

    def slurm(
        self,
        nodes: int,
        corpus: Path | None = None,
        task_size: str | None = None,
        per_element: int | None = None,
    ) -> dict[str, Any]:
        self.runs += 1
        version = f"slurm{self.runs}"
        base = self.args(version, corpus or self.corpus, task_size or self.task_size)
        if per_element is None:  # the plan's task count, from the local run of the same corpus
            per_element = math.ceil(self.tasks / (nodes * ELEMENTS_PER_NODE[0]))
        excluded = self.all_nodes[nodes:]
        extra = [
            "--slurm-extra=--exclusive",
            *([f"--slurm-extra=--exclude={','.join(excluded)}"] if excluded else []),
        ]
        cpu0, started = host_cpu(), time.monotonic()
        doc = storekit(
            [
                *base,
                "--executor",
                "slurm",
                "--slurm-cpus",
                "1",
                "--slurm-tasks-per-element",
                str(per_element),
                "--slurm-wait",  # returns once finalize has published the dataset and removed the work dir
                *extra,
            ],
            self.config,
        )
        seconds, cpu = time.monotonic() - started, cpu_delta(cpu0)
        submitted = seconds - doc["waited_seconds"]
        jobs = [doc["slurm"]["array_job_id"], doc["slurm"]["finalize_job_id"]]
        while queued(jobs):  # not part of the time: the elements' exit and Slurm's bookkeeping
            if time.monotonic() - started > WAIT_S:
                subprocess.run(["scancel", *jobs], check=False)
                raise RuntimeError(f"jobs {jobs} still queued after {WAIT_S} s")
            time.sleep(0.05)
        queue_empty = time.monotonic() - started
        if not (self.dataset(version) / "manifest.json").is_file():
            logs = Path(doc["slurm"]["log_dir"])
            raise RuntimeError(f"slurm run {version} published nothing; logs in {logs}")
        info = {
            "executor": "slurm",
            "nodes": nodes,
            "elements": doc["slurm"]["elements"],
            "tasks_per_element": doc["slurm"]["tasks_per_element"],
            "submit_seconds": round(submitted, 3),
            "queue_empty_seconds": round(queue_empty, 3),  # when squeue (0.05 s polls) no longer lists them
            **element_times(Path(doc["slurm"]["log_dir"]), doc["slurm"]["array_job_id"]),
            **cpu,
        }
        return self._done(version, seconds, info)

    def _done(self, version: str, seconds: float, info: dict[str, Any]) -> dict[str, Any]:
        dataset = self.dataset(version)
        manifest = json.loads((dataset / "manifest.json").read_bytes())
        tokens = int(manifest["stats"]["tokens"])
        row = {
            **info,
            "seconds": round(seconds, 3),
            "tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1),
            "tasks": int(manifest["stats"]["tasks"]),
            "shards_sha256": shards_digest(dataset),
        }
        self.tasks = row["tasks"]
        shutil.rmtree(dataset)
        return row


def element_times(log_dir: Path, array: str) -> dict[str, Any]:
    """What the element logs say: each one's start-up (exec to ready: Python, imports, plan,
    tokenizer), its own tasks' time, the tasks it ran for other elements once its own were done and
    how long that took, and the inline finalize's; whether the finalize job had to run."""
    ready, tasks, fin, helped, helping = [], [], [], [], []
    for log in sorted(log_dir.glob(f"{array}_*.out")):
        text = log.read_text()
        ready += [float(x) for x in re.findall(r"\(ready ([\d.]+) s after start", text)]
        tasks += [float(x) for x in re.findall(r"tasks run in ([\d.]+) s", text)]
        fin += [float(x) for x in re.findall(r": prepared .* in ([\d.]+) s$", text, re.MULTILINE)]
        for n, s in re.findall(r"helped with (\d+) tasks in ([\d.]+) s", text):
            helped.append(int(n))
            helping.append(float(s))
    return {
        "element_ready_s": ready,
        "element_tasks_s": tasks,
        "element_helped_tasks": helped,  # only elements that helped
        "element_helping_s": helping,
        "inline_finalize_s": fin,
        "finalize_job_ran": any(p.name.split(".")[0].isdigit() for p in log_dir.glob("*.out")),
    }


def small_corpus(root: Path, source: Path, elements: int) -> Path:
    """The first `elements` x ~64 KiB of the corpus, whole lines: one 64 KiB task per element."""
    out = root / "small.jsonl"
    budget = elements * 64 * 1024
    with open(source, "rb") as src, open(out, "wb") as dst:
        for line in src:
            dst.write(line)
            budget -= len(line)
            if budget <= 0:
                break
    return out


def dispatch_overhead(bench: Bench, elements: int) -> dict[str, Any]:
    corpus = small_corpus(bench.root, bench.corpus, elements)
    local = bench.local(1, corpus, "64KiB")
    slurm = bench.slurm(1, corpus, "64KiB", per_element=1)
    per = (slurm["seconds"] - local["seconds"]) / slurm["elements"]
    return {"local": local, "slurm": slurm, "seconds_per_element": round(per, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="1,2,4")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--tokenizer", type=Path, default=TOKENIZER)
    ap.add_argument("--task-size", help="prepare's --task-size (default: its own choice)")
    ap.add_argument("--dispatch-elements", type=int, default=8, help="elements of the overhead run (0: skip)")
    ap.add_argument(
        "--root", type=Path, help="shared directory for storage and work dirs (default: a temp dir)"
    )
    ap.add_argument("--elements-per-node", type=int, default=1)
    ap.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed local + Slurm runs first (default 1): the corpus, libraries and the tokenizer "
        "cache in memory for both alike (this VM's DAMON pages out what stays idle for 60 s)",
    )
    ap.add_argument("--tree", type=Path, default=REPO, help="storekit checkout to run (default: this one)")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    TREE[0] = args.tree.resolve()
    byte_compile(sys.executable, TREE[0])  # as installed, each Slurm element's process included
    ELEMENTS_PER_NODE[0] = args.elements_per_node
    if not args.corpus.is_file() or not args.tokenizer.is_file():
        sys.exit(
            f"error: need {args.corpus} and {args.tokenizer} (benchmarks/README.md: make_corpus, setup_peers)"
        )
    root = Path(tempfile.mkdtemp(prefix="storekit-bench-slurm-", dir=args.root)).resolve()
    bench = Bench(root, args.corpus.resolve(), args.tokenizer.resolve(), args.task_size)
    counts = [int(n) for n in args.nodes.split(",")]
    if max(counts) > len(bench.all_nodes):
        sys.exit(f"error: --nodes {max(counts)}: sinfo lists {len(bench.all_nodes)} nodes")
    result: dict[str, Any] = {"cpu_count": os.cpu_count(), "slurm_nodes": bench.all_nodes, "rows": []}
    try:
        if args.dispatch_elements:
            result["dispatch"] = dispatch_overhead(bench, args.dispatch_elements)
            d = result["dispatch"]
            print(
                f"dispatch: {d['slurm']['elements']} elements on 1 node {d['slurm']['seconds']:.1f} s, "
                f"local 1 worker {d['local']['seconds']:.1f} s: {d['seconds_per_element']:.2f} s per element"
            )
        for _ in range(args.warmup):
            for row in (bench.local(max(counts)), bench.slurm(max(counts))):
                print(f"warm-up {row['executor']}: {row['seconds']:.1f} s (not counted)", flush=True)
        reference = None
        for _ in range(args.repeat):
            for n in counts:
                for row in (bench.local(n), bench.slurm(n)):
                    reference = reference or row["shards_sha256"]
                    row["identical"] = row["shards_sha256"] == reference
                    result["rows"].append(row)
                    print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{'nodes':>5} {'local tok/s':>12} {'slurm tok/s':>12} {'ratio':>6} {'elements':>8}  identical")
    for n in counts:
        local = [r for r in result["rows"] if r["executor"] == "local" and r["workers"] == n]
        slurm = [r for r in result["rows"] if r["executor"] == "slurm" and r["nodes"] == n]
        lt = statistics.median(r["tokens_per_s"] for r in local)
        st = statistics.median(r["tokens_per_s"] for r in slurm)
        same = all(r["identical"] for r in local + slurm)
        print(f"{n:>5} {lt:>12,.0f} {st:>12,.0f} {st / lt:>6.2f} {slurm[0]['elements']:>8}  {same}")
    print("\nwhere the seconds went (first run of each; Slurm's element figures: the slowest element)")
    head = ["nodes", "local", "tasks", "final", "rest", "slurm", "submit", "ready", "tasks", "final", "rest"]
    print(" ".join(f"{h:>6}" for h in head) + "  finalize job")
    for n in counts:
        lo = next(r for r in result["rows"] if r["executor"] == "local" and r["workers"] == n)
        r = next(r for r in result["rows"] if r["executor"] == "slurm" and r["nodes"] == n)
        ready, tasks = max(r["element_ready_s"], default=0.0), max(r["element_tasks_s"], default=0.0)
        fin = sum(r["inline_finalize_s"])
        rest = r["seconds"] - r["submit_seconds"] - ready - tasks - fin  # queueing, exits, the finalize job
        local_rest = lo["seconds"] - (lo["tasks_s"] or 0) - (lo["finalize_s"] or 0)  # start-up, plan
        cells = [lo["seconds"], lo["tasks_s"] or 0, lo["finalize_s"] or 0, local_rest]
        cells += [r["seconds"], r["submit_seconds"], ready, tasks, fin, rest]
        used = "ran" if r["finalize_job_ran"] else "cancelled"
        print(f"{n:>6} " + " ".join(f"{c:>6.2f}" for c in cells) + f"  {used}")
    print("\nhost CPU-seconds over each command, busy / idle (median; every process of the host)")
    print(f"{'nodes':>5} {'local':>13} {'slurm':>13}")
    for n in counts:
        cols = []
        for ex, key in (("local", "workers"), ("slurm", "nodes")):
            rows = [r for r in result["rows"] if r["executor"] == ex and r[key] == n]
            busy = statistics.median(r["host_busy_cpu_s"] for r in rows)
            idle = statistics.median(r["host_idle_cpu_s"] for r in rows)
            cols.append(f"{busy:6.2f} /{idle:5.2f}")
        print(f"{n:>5} {cols[0]:>13} {cols[1]:>13}")
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
