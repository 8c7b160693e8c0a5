#!/usr/bin/env python3
"""What a second core gives on this host: the same CPU-bound work as 1 process on 1 core, then as 2
independent processes on 2 cores (each pinned with sched_setaffinity), rounds alternated.

efficiency = (work of both processes / wall of the pair) / (2 x work / wall of the single one).
No tool can show a better parallel efficiency on this host than what independent processes get.
Each run also reports how many cores the VM's other processes kept busy meanwhile (busy time in
/proc/stat less ours) and the steal time: a 2-core run shares its cores with them, a 1-core run
leaves them the other core.

Workloads (each a fixed amount of work, no shared memory, no I/O):
  python   the interpreter's own loop (integer arithmetic): the Python side of a task
  sha256   hashlib over a 1 MiB buffer (compiled code, GIL released, fits in L2)
  stream   numpy sum over a 256 MiB array (memory bandwidth: what two cores share)

Usage: python3 benchmarks/host_scaling.py [--rounds 3] [--seconds 6] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

from _measure import host_cpu


def _python(n: int) -> None:
    x = 0
    for i in range(n):
        x = (x + i * 7) & 0xFFFF


def _sha256(n: int) -> None:
    import hashlib

    buf = b"\x5a" * (1 << 20)
    for _ in range(n):
        hashlib.sha256(buf).digest()


_ARRAY = None


def _stream(n: int) -> None:
    import numpy as np

    global _ARRAY
    if _ARRAY is None:
        _ARRAY = np.ones(32 << 20, dtype=np.float64)  # 256 MiB
    for _ in range(n):
        _ARRAY.sum()


WORKLOADS = {"python": _python, "sha256": _sha256, "stream": _stream}


def _child(name: str, n: int, cpu: int, start: mp.Event, out: mp.Queue) -> None:
    os.sched_setaffinity(0, {cpu})
    fn = WORKLOADS[name]
    fn(max(1, n // 50))  # warm: imports, page faults
    start.wait()
    t0, c0 = time.perf_counter(), time.process_time()
    fn(n)
    out.put((time.perf_counter() - t0, time.process_time() - c0))


LAST_OTHERS: list[tuple[float, float]] = []  # (others' busy cores, steal cores) of the last run()


def run(name: str, n: int, cpus: list[int]) -> list[float]:
    """Seconds each of len(cpus) processes took for n units (started together). Also records how
    many cores everything else on the VM kept busy meanwhile, and the steal the hypervisor reported."""
    ctx = mp.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_child, args=(name, n, c, start, out)) for c in cpus]
    for p in procs:
        p.start()
    time.sleep(0.5)
    cpu0 = host_cpu()
    t0 = time.perf_counter()
    start.set()
    got = [out.get() for _ in procs]
    wall = time.perf_counter() - t0
    cpu1 = host_cpu()
    for p in procs:
        p.join()
    ours = sum(cpu for _, cpu in got)
    LAST_OTHERS[:] = [(max(0.0, (cpu1.busy - cpu0.busy) - ours) / wall, (cpu1.steal - cpu0.steal) / wall)]
    return [w for w, _ in got]


def calibrate(name: str, seconds: float) -> int:
    n = 1
    while True:
        t = run(name, n, [0])[0]
        if t >= 0.5:
            return max(1, int(n * seconds / t))
        n *= 4 if t < 0.1 else 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--json-out")
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("needs 2 CPUs", file=sys.stderr)
        return 2
    results = {}
    print(f"load average at start: {os.getloadavg()}", file=sys.stderr)
    for name in args.workloads.split(","):
        n = calibrate(name, args.seconds)
        effs, singles, pairs, others_pair = [], [], [], []
        for r in range(args.rounds):
            order = [1, 2] if r % 2 == 0 else [2, 1]
            got, others = {}, {}
            for k in order:
                got[k] = run(name, n, cpus[:k])
                others[k] = LAST_OTHERS[0]
            one = got[1][0]
            pair = max(got[2])
            singles.append(one)
            pairs.append(got[2])
            effs.append(one / pair)  # (2n / pair) / (2 * n / one)
            others_pair.append(others[2][0])
            print(
                f"{name} round {r + 1}: 1 proc {one:.2f} s, 2 procs {got[2][0]:.2f}/{got[2][1]:.2f} s, "
                f"efficiency {effs[-1]:.3f}; other processes kept {others[1][0]:.2f} / {others[2][0]:.2f} "
                f"cores busy, steal {others[1][1]:.2f} / {others[2][1]:.2f} cores (1 proc / 2 procs)",
                file=sys.stderr,
            )
        results[name] = {
            "units": n,
            "single_s": singles,
            "pair_s": pairs,
            "efficiency": effs,
            "median_efficiency": statistics.median(effs),
            "others_busy_cores_during_pair": others_pair,
        }
    head = "| workload | 1 process, 1 core (s) | 2 processes, 2 cores (s) | efficiency (rounds) | others |"
    print(head)
    print("| --- | ---: | ---: | --- | ---: |")
    for name, r in results.items():
        one = statistics.median(r["single_s"])
        pair = statistics.median(max(p) for p in r["pair_s"])
        rounds = ", ".join(f"{e:.2f}" for e in r["efficiency"])
        busy = statistics.median(r["others_busy_cores_during_pair"])
        print(f"| {name} | {one:.2f} | {pair:.2f} | {r['median_efficiency']:.3f} ({rounds}) | {busy:.2f} |")
    print(f"load average at end: {os.getloadavg()}", file=sys.stderr)
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
