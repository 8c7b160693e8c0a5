#!/usr/bin/env python3
"""Side experiments behind bench_io_vs_fio.py's comparisons (issue #17): each tool beside a third,
independent reference, on the same disk in the same minutes, alternating.

  seqwrite N  rounds of one sequential 1 MiB O_DIRECT write of --size, fsync timed, by
              storekit (bench io --pattern shards), fio as the benchmark runs it (iomem=mmaphuge),
              fio as typed by hand (malloc'd buffer, default fallocate) and dd oflag=direct
              conv=fsync; per run the rate and the disk's write requests per MiB written.
  meta        the same N empty files stat'ed by fio filestat, by storekit's timed loop (timed_ops.c
              through the worker's Python loop) and by peers/metaloop.c (nothing but the call between
              two clock readings); each tool then unlinks its own N files. Rotating order per round.
              --syscalls adds `perf stat` counts of each tool's system calls per file.
  creates     empty-file creates by metaloop after deletes of various ages (the two modes).

Run it holding the benchmark lock, like the benchmark:
  flock /tmp/storekit-bench.lock python3 benchmarks/io_experiments.py seqwrite --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_io_vs_fio import SETTLE_DEVICE, mount_of, reserve_huge_pages, settle  # noqa: E402

MiB = 1 << 20
RESULTS: dict[str, list[float]] = {}


def write_requests() -> int:
    return int(Path(SETTLE_DEVICE[0]).read_text().split()[4])


def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    return proc


# -- sequential write -----------------------------------------------------------------------------


def seq_storekit(work: Path, size: int) -> float:
    target = work / "storekit"
    target.mkdir(exist_ok=True)
    out = run([sys.executable, "-m", "storekit", "bench", "io", "--target", str(target), "--no-drop-caches",
               "--pattern", "shards", "--workers", "1", "--block-size", "1M", "--size", str(size),
               "--file-size", str(size), "--repeat", "1", "--json", "--quiet"], cwd=REPO)  # fmt: skip
    phase = json.loads(out.stdout)["results"][0]["phases"][0]
    return float(phase["repeats"][0]["bandwidth_bytes_per_s"]) / 1e6


def seq_fio(work: Path, size: int, extra: list[str]) -> float:
    path = work / "fio.bin"
    out = run(["fio", "--output-format=json", *extra, "--name=w", f"--filename={path}", "--rw=write",
               "--bs=1M", f"--size={size}", "--direct=1", "--ioengine=psync", "--end_fsync=1"])  # fmt: skip
    path.unlink()
    job = json.loads(out.stdout[out.stdout.index("{") :])["jobs"][0]
    return float(job["write"]["bw_bytes"]) / 1e6


def seq_dd(work: Path, size: int) -> float:
    path = work / "dd.bin"
    out = run(
        ["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={size // MiB}", "oflag=direct", "conv=fsync"]
    )
    path.unlink()
    seconds = float(re.findall(r"copied, ([0-9.]+) s", out.stderr)[-1])
    return size / seconds / 1e6


def seqwrite(args: argparse.Namespace, work: Path) -> None:
    size = args.size
    as_benchmark = ["--iomem=mmaphuge", "--fallocate=none"]
    tools: dict[str, Callable[[], float]] = {
        "storekit": lambda: seq_storekit(work, size),
        "fio iomem=mmaphuge fallocate=none": lambda: seq_fio(work, size, as_benchmark),
        "fio (malloc, default fallocate)": lambda: seq_fio(work, size, []),
        "dd oflag=direct conv=fsync": lambda: seq_dd(work, size),
    }  # fmt: skip
    names = list(tools)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            settle()
            before = write_requests()
            rate = tools[name]()
            per_mib = (write_requests() - before) / (size / MiB)
            RESULTS.setdefault(name, []).append(rate)
            RESULTS.setdefault(f"{name} requests/MiB", []).append(per_mib)
            print(f"round {r} {name:36s} {rate:7.0f} MB/s  {per_mib:.2f} write requests per MiB", flush=True)


# -- metadata: the same files, three timers -------------------------------------------------------

SK_LOOP = """
import os, sys
import numpy as np
from storekit.bench import native
ops, why = native.load()
assert ops is not None, why
op, directory, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
names = [os.fsencode(f"{directory}/w0000.0.{i}") for i in range(n)]
call = ops.op(op)
starts, ends = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
_keep, times = ops.times(starts, ends)
for slot, path in enumerate(names):  # the worker's loop (engine_posix.Meta._native_chunk)
    if call(times, slot, path, None, 0) != 0:
        raise SystemExit(f"{op} failed at {path}")
print(float((ends - starts).mean()), float(np.median(ends - starts)))
"""
PERF_EVENTS = ",".join(
    ["raw_syscalls:sys_enter"] + [f"syscalls:sys_enter_{c}" for c in ("newfstatat", "unlink", "fadvise64")]
)


def perf(cmd: list[str], counts: dict[str, float] | None) -> list[str]:
    if counts is None:
        return cmd
    return ["perf", "stat", "-x,", "-o", "/tmp/io-experiments.perf", "-e", PERF_EVENTS, *cmd]


def perf_counts(counts: dict[str, float] | None, n: int) -> str:
    if counts is None:
        return ""
    out = []
    for line in Path("/tmp/io-experiments.perf").read_text().splitlines():
        parts = line.split(",")
        if len(parts) > 3 and parts[0].isdigit():
            out.append(
                f"{parts[2].split(':')[1].removeprefix('sys_enter_') or 'all'}={int(parts[0]) / n:.2f}"
            )
    return "  syscalls per file: " + " ".join(out)


def meta_fio(op: str, directory: Path, n: int, counts: dict[str, float] | None) -> tuple[float, str]:
    out = run(perf(["fio", "--output-format=json", "--name=w0000", f"--ioengine=file{op}",
                    f"--directory={directory}", f"--nrfiles={n}", "--filesize=4k", "--bs=4k", "--openfiles=1",
                    "--create_on_open=1", "--unlink=0", "--file_service_type=sequential",
                    "--filename_format=w0000.0.$filenum"], counts))  # fmt: skip
    job = json.loads(out.stdout[out.stdout.index("{") :])["jobs"][0]
    ddir = "write" if job["write"]["total_ios"] else "read"
    clat = job[ddir]["clat_ns"]
    return (float(clat["mean"]), float(clat["percentile"]["50.000000"])), perf_counts(counts, n)


def meta_storekit(op: str, directory: Path, n: int, counts: dict[str, float] | None) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = run(perf([sys.executable, "-c", SK_LOOP, op, str(directory), str(n)], counts), env=env)
    mean, p50 = out.stdout.split()
    return (float(mean), float(p50)), perf_counts(counts, n)


def meta_c(
    op: str, directory: Path, n: int, counts: dict[str, float] | None, loop: Path
) -> tuple[float, str]:
    out = run(
        perf([str(loop), {"delete": "unlink"}.get(op, op), str(directory), str(n), "%s/w0000.0.%d"], counts)
    )
    doc = json.loads(out.stdout)
    return (float(doc["mean_ns"]), float(doc["p50_ns"])), perf_counts(counts, n)


def meta(args: argparse.Namespace, work: Path) -> None:
    loop = work / "metaloop"
    run(["cc", "-O2", "-o", str(loop), str(REPO / "benchmarks" / "peers" / "metaloop.c")])
    n, counts = args.files, ({} if args.syscalls else None)
    tools = {
        "fio": lambda op, d: meta_fio(op, d, n, counts),
        "storekit": lambda op, d: meta_storekit(op, d, n, counts),
        "metaloop.c": lambda op, d: meta_c(op, d, n, counts, loop),
    }
    names = list(tools)
    for r in range(args.rounds):
        order = names[r % 3 :] + names[: r % 3]
        dirs = {}
        for name in names:  # at benchmark depth; created by the C loop, so alike for everyone
            dirs[name] = work / name / "scratch" / "storekit-bench-0000" / "meta-unique" / "w0000"
            shutil.rmtree(work / name, ignore_errors=True)
            dirs[name].mkdir(parents=True)
            run([str(loop), "create", str(dirs[name]), str(n), "%s/w0000.0.%d"])
        for op in ("stat", "delete"):
            for name in order:
                settle()
                where = dirs["fio"] if op == "stat" else dirs[name]  # stat: the very same files
                (mean_ns, p50_ns), syscalls = tools[name](op, where)
                RESULTS.setdefault(f"{op} {name}", []).append(mean_ns)
                RESULTS.setdefault(f"{op} {name} p50", []).append(p50_ns)
                print(
                    f"round {r} {op:6s} {name:10s} mean {mean_ns:7.0f} ns  p50 {p50_ns:7.0f} ns{syscalls}",
                    flush=True,
                )
    for op in ("stat", "delete"):
        for stat in ("", " p50"):
            ref = RESULTS[f"{op} fio{stat}"]
            for name in names:
                mine = RESULTS[f"{op} {name}{stat}"]
                ratio = statistics.median(f / m for f, m in zip(ref, mine, strict=True))
                print(
                    f"{op:6s} {name:10s} {stat or ' mean':5s} median over rounds "
                    f"{statistics.median(mine):7.0f} ns; rate / fio's {ratio:.3f}"
                )


# -- creates: the two modes -----------------------------------------------------------------------


def creates(args: argparse.Namespace, work: Path) -> None:
    loop = work / "metaloop"
    run(["cc", "-O2", "-o", str(loop), str(REPO / "benchmarks" / "peers" / "metaloop.c")])
    n = args.files

    def create(tag: str) -> Path:
        d = work / tag
        d.mkdir()
        out = json.loads(run([str(loop), "create", str(d), str(n)]).stdout)
        print(
            f"{tag:44s} create mean {out['mean_ns'] / 1e3:8.1f} us  p50 {out['p50_ns'] / 1e3:8.1f} us",
            flush=True,
        )
        return d

    def delete(d: Path) -> None:
        run([str(loop), "unlink", str(d), str(n)])

    settle()
    delete(create("first directory"))
    delete(create("second, same second as the deletes"))
    time.sleep(2)
    d = create("third, 2 s after the deletes")
    delete(d)
    time.sleep(2)
    d = create("fourth, 2 s after more deletes")
    delete(d)
    time.sleep(args.wait)
    create(f"fifth, {args.wait:g} s after the last deletes")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=["seqwrite", "meta", "creates"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=lambda s: int(s[:-1]) << {"M": 20, "G": 30}[s[-1]], default=4 << 30)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--syscalls", action="store_true", help="meta: perf stat counts per file")
    parser.add_argument("--wait", type=float, default=40.0, help="creates: seconds before the last create")
    parser.add_argument("--dir", default="/var/tmp/sk-bench")
    args = parser.parse_args()
    work = Path(args.dir) / f"experiments-{os.getpid()}"
    work.mkdir(parents=True)
    mount = mount_of(str(work))
    if mount:
        SETTLE_DEVICE[:] = [f"/sys/class/block/{os.path.basename(mount['source'])}/stat"]
    undo = reserve_huge_pages(8) if args.what == "seqwrite" else None
    try:
        {"seqwrite": seqwrite, "meta": meta, "creates": creates}[args.what](args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if undo is not None:
            undo()
    print(
        f"load average after: {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


if __name__ == "__main__":
    main()
