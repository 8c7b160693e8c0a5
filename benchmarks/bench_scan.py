"""Tree scanning for tier planning: storekit's streaming scanner against `find -printf '%s %T@ %p\\n'`
on the same warm tree of 1,000,000 files, alternating, same output work (each writes one line per
entry, size + mtime + full path, to /dev/null). Target (issue #11): storekit's rate >= 0.8x find's,
with the scanning process's RSS under 1 GiB.

    /work/wt/quiet /work/main/.venv/bin/python benchmarks/bench_scan.py --rounds 5

The tree (100 runs x 100 steps x 100 empty files, plus the 10,101 directories) is built once under
benchmarks/.work/scan-tree-<files> outside the lock and reused; a first untimed pass of each tool warms
the dentry and inode caches and checks that both see the same entries. storekit's scan runs in a
child process so that its peak RSS is its own; its time is taken inside the child around the scan
(interpreter start and imports excluded), find's around the whole process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_io_vs_fio import hold_lock  # noqa: E402

TARGET = 0.8
RSS_LIMIT_MIB = 1024

CHILD = r"""
import json, resource, sys, time
from storekit.store.scan import load, scan_tree
native, why = load()
t0, c0 = time.perf_counter(), time.process_time()
root, mode = sys.argv[1], sys.argv[2]
n = 0
if mode == "lines":
    with open("/dev/null", "w", buffering=1 << 16) as out:
        write = out.write
        for e in scan_tree(root, root + "/"):
            write(f"{e.size} {e.mtime_ns} {e.rel}\n")
            n += 1
else:
    for e in scan_tree(root, root + "/"):
        n += 1
print(json.dumps({"entries": n, "seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "listing": "compiled" if native else f"python ({why})"}))
"""


def build_tree(files: int, work: Path) -> Path:
    """runs/steps/files, 100 files per step directory; built under a temp name, renamed when whole."""
    final = work / f"scan-tree-{files}"
    if final.is_dir():
        return final
    tmp = work / f".scan-tree-{files}.building-{os.getpid()}"
    per_dir = 100
    dirs = files // per_dir
    started = time.monotonic()
    for d in range(dirs):
        step = tmp / f"run_{d // 100:03d}" / f"step_{(d % 100) * 1000:07d}"
        step.mkdir(parents=True)
        for f in range(per_dir):
            os.close(os.open(step / f"shard_{f:03d}.distcp", os.O_CREAT | os.O_WRONLY, 0o644))
    os.rename(tmp, final)
    print(f"built {final} ({files:,} files) in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return final


def run_find(tree: Path) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(os.devnull, "w") as null:
        subprocess.run(["find", str(tree), "-printf", "%s %T@ %p\n"], stdout=null, check=True)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"seconds": seconds, "cpu": cpu, "rss_mib": after.ru_maxrss / 1024}


def run_storekit(tree: Path, mode: str) -> dict[str, float | str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), mode], env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, float | str] = json.loads(done.stdout)
    return result


def count_find(tree: Path) -> int:
    done = subprocess.run(["find", str(tree), "-printf", "x\n"], capture_output=True, check=True)
    return done.stdout.count(b"\n") - 1  # find prints the starting directory too


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mode", choices=["lines", "count"], default="lines")
    ap.add_argument("--work", type=Path, default=REPO / "benchmarks" / ".work")
    args = ap.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    tree = build_tree(args.files, args.work)  # before the lock: nobody waits for this
    lock = hold_lock()
    expected = count_find(tree)  # warms the caches
    warm = run_storekit(tree, "count")
    if warm["entries"] != expected:
        print(f"error: storekit saw {warm['entries']} entries, find {expected}", file=sys.stderr)
        return 1
    print(f"{expected:,} entries; storekit listing: {warm['listing']}", file=sys.stderr)

    rows: list[tuple[dict[str, float], dict[str, float | str]]] = []
    for r in range(args.rounds):
        if r % 2 == 0:
            f, s = run_find(tree), run_storekit(tree, args.mode)
        else:
            s, f = run_storekit(tree, args.mode), run_find(tree)
        rows.append((f, s))
        ratio = float(f["seconds"]) / float(s["seconds"])
        print(
            f"round {r + 1}: find {f['seconds']:.2f} s ({f['cpu']:.2f} CPU-s), storekit {s['seconds']:.2f} s "
            f"({s['cpu']:.2f} CPU-s, {s['rss_mib']:.0f} MiB) -> {ratio:.2f}x",
            file=sys.stderr,
        )
    del lock

    ratios = [float(f["seconds"]) / float(s["seconds"]) for f, s in rows]
    ratio = statistics.median(ratios)
    find_rate = statistics.median(expected / float(f["seconds"]) for f, _ in rows)
    sk_rate = statistics.median(expected / float(s["seconds"]) for _, s in rows)
    rss = max(float(s["rss_mib"]) for _, s in rows)
    find_cpu = statistics.median(float(f["cpu"]) for f, _ in rows)
    sk_cpu = statistics.median(float(s["cpu"]) for _, s in rows)
    ok = ratio >= TARGET and rss < RSS_LIMIT_MIB
    print(
        f"### scan of {expected:,} entries ({args.mode}, {args.rounds} rounds, listing {warm['listing']})\n"
    )
    print("| tool | median entries/s | median CPU-s | peak RSS |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| find -printf '%s %T@ %p\\n' | {find_rate:,.0f} | {find_cpu:.2f} | – |")
    print(f"| storekit scan_tree | {sk_rate:,.0f} | {sk_cpu:.2f} | {rss:.0f} MiB |")
    print()
    lo, hi = min(ratios), max(ratios)
    print("| ratio | value | target | per-round range | verdict |")
    print("| --- | ---: | ---: | ---: | --- |")
    verdict = "**PASS**" if ratio >= TARGET else "**FAIL**"
    print(f"| storekit rate / find rate | {ratio:.2f} | >= {TARGET} | {lo:.2f}-{hi:.2f} | {verdict} |")
    rss_verdict = "**PASS**" if rss < RSS_LIMIT_MIB else "**FAIL**"
    print(f"| storekit peak RSS (MiB) | {rss:.0f} | < {RSS_LIMIT_MIB} | – | {rss_verdict} |")
    return 0 if ok else 4


if __name__ == "__main__":
    sys.exit(main())
