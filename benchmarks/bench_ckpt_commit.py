"""What the commit API costs: a checkpoint written through `storekit.checkpoint.commit` (hashing in the
same pass, partial manifests, merge after a barrier, manifest last, rename, `latest` pointer) against
the same files written with fsync and no manifest, from N rank processes at once.

Each round writes both variants, in alternating order, into a fresh run directory; a variant's time is
from the ranks' common start (a barrier) to the last rank's return, so the commit's merge, rename and
final barrier are inside it. Target (issue #10): median of the per-round ratios <= 1.05.

    flock /tmp/storekit-bench.lock python benchmarks/bench_ckpt_commit.py --size 4GiB --rounds 7

(the script takes the lock itself when not run under flock). Writes go to --dir (default
benchmarks/.work/ckpt) and are deleted after each round.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_io_vs_fio import hold_lock  # noqa: E402

from storekit.checkpoint import commit  # noqa: E402
from storekit.units import parse_size  # noqa: E402

MiB = 1024 * 1024
BLOCK = 16 * MiB  # what torch.save and friends hand to write() for a large tensor is of this order


def write_plain(path: Path, nbytes: int, block: memoryview) -> None:
    with open(path, "wb") as fh:
        left = nbytes
        while left:
            n = min(left, len(block))
            fh.write(block[:n])
            left -= n
        fh.flush()
        os.fsync(fh.fileno())


def rank_main(
    variant: str,
    rank: int,
    world: int,
    run: str,
    step: int,
    files: int,
    file_bytes: int,
    barrier: Any,
    out: Any,
) -> None:
    block = memoryview(os.urandom(BLOCK))
    barrier.wait()
    t0 = time.perf_counter()
    if variant == "plain":
        unit = Path(run) / f"step_{step:06d}"
        unit.mkdir(parents=True, exist_ok=True)
        for i in range(files):
            write_plain(unit / f"rank{rank:03d}_{i:03d}.bin", file_bytes, block)
        barrier.wait()
        if rank == 0:
            fd = os.open(unit, os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(fd)
            os.close(fd)
        barrier.wait()
    else:
        with commit(run, step, rank=rank, world_size=world, barrier=barrier.wait) as stage:
            for i in range(files):
                with stage.open(f"rank{rank:03d}_{i:03d}.bin") as fh:
                    left = file_bytes
                    while left:
                        n = min(left, len(block))
                        fh.write(block[:n])
                        left -= n
    out.put((rank, t0, time.perf_counter()))


def one(variant: str, run: Path, step: int, ranks: int, files: int, file_bytes: int) -> float:
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(ranks), ctx.Queue()
    procs = [
        ctx.Process(
            target=rank_main, args=(variant, r, ranks, str(run), step, files, file_bytes, barrier, out)
        )
        for r in range(ranks)
    ]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"{variant} rank failed with exit code {p.exitcode}")
    return max(t1 for _, _, t1 in results) - min(t0 for _, t0, _ in results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="4GiB", help="checkpoint size, all ranks together")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--files-per-rank", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--dir", type=Path, default=REPO / "benchmarks/.work/ckpt")
    args = ap.parse_args()
    lock = hold_lock()
    total = parse_size(args.size)
    file_bytes = total // (args.ranks * args.files_per_rank)
    times: dict[str, list[float]] = {"plain": [], "storekit": []}
    ratios = []
    load = os.getloadavg()
    for rnd in range(args.rounds):
        order = ["plain", "storekit"] if rnd % 2 == 0 else ["storekit", "plain"]
        got = {}
        for variant in order:
            run = args.dir / f"run_{rnd:03d}_{variant}"
            shutil.rmtree(run, ignore_errors=True)
            os.sync()
            got[variant] = one(variant, run, 100, args.ranks, args.files_per_rank, file_bytes)
            shutil.rmtree(run)
            os.sync()
        ratio = got["storekit"] / got["plain"]
        ratios.append(ratio)
        for k, v in got.items():
            times[k].append(v)
        gib = total / 2**30
        print(
            f"round {rnd + 1}/{args.rounds} ({'/'.join(order)}): plain {got['plain']:.2f} s "
            f"({gib / got['plain']:.2f} GiB/s), storekit {got['storekit']:.2f} s, ratio {ratio:.3f}",
            flush=True,
        )
    med_ratio = statistics.median(ratios)
    plain, sk = statistics.median(times["plain"]), statistics.median(times["storekit"])
    verdict = "PASS" if med_ratio <= 1.05 else "FAIL"
    print()
    print(
        f"### commit overhead — {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC "
        f"({args.ranks} ranks, {args.size}, {args.files_per_rank} files per rank, {args.rounds} rounds)"
    )
    print()
    print(f"Load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}.")
    print()
    print("| variant | median s | GiB/s | per-round s |")
    print("| --- | ---: | ---: | --- |")
    for name, med in (("write + fsync, no manifest", plain), ("storekit commit()", sk)):
        key = "plain" if name.startswith("write") else "storekit"
        rounds = ", ".join(f"{t:.2f}" for t in times[key])
        print(f"| {name} | {med:.2f} | {total / 2**30 / med:.2f} | {rounds} |")
    print()
    print("| ratio | value | target | per-round range | verdict |")
    print("| --- | ---: | ---: | ---: | --- |")
    print(
        f"| commit / plain (median of per-round ratios) | {med_ratio:.3f} | ≤ 1.05 | "
        f"{min(ratios):.3f}–{max(ratios):.3f} | **{verdict}** |"
    )
    print(f"| commit / plain (ratio of medians) | {sk / plain:.3f} | ≤ 1.05 | - | - |")
    del lock


if __name__ == "__main__":
    main()
