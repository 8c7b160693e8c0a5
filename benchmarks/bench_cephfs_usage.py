"""An area's usage on CephFS: `storekit status` walking the tree (what it does on any POSIX tier)
against reading the file system's recursive statistics (ceph.dir.rbytes/rfiles, what it does on CephFS
now), on the same tree of N small files, read through the OTHER mount (a node that did not write them).

    eval "$(scripts/services/cephfs-up.sh)"
    /work/main/.venv/bin/python benchmarks/bench_cephfs_usage.py --files 10000 --rounds 3
    /work/main/.venv/bin/python benchmarks/bench_cephfs_usage.py --files 100000 --rounds 2 --procs 8  # ~9 min
    /work/main/.venv/bin/python benchmarks/bench_cephfs_usage.py --files 1000000 --rounds 1 --sparse --keep

The issue asks for 1M files; on this 2-core host writing them through ceph-fuse takes ~1 h, so the
default is 10,000 (~40 s of set-up, ~1.5 min in all) and the walk's cost grows linearly with N while the
rstat read does not change. The files are made by --procs processes at once (os.open/write/fsync/close,
one step directory per task), which is what makes --files 100000 fit in minutes; --sparse sizes them
by ftruncate and writes no data (a walk and the rstats read names and sizes only), for --files 1000000.
The tree is built under the first mount in a fresh directory, both ways are checked to give the same
totals (after the MDS has propagated the rstats), then each is timed `--rounds` times, alternating,
on the second mount. The tree is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from storekit.config import TierConfig  # noqa: E402
from storekit.fsfeatures import CephFs  # noqa: E402
from storekit.store import open_store  # noqa: E402


def build_dir(job: tuple[Path, int, int, int, bool]) -> int:
    """One step directory's files: open/write/fsync/close (fsync: the MDS's rstats count flushed
    sizes), the bare system calls, so the set-up is bound by the mount, not by Python. `sparse`:
    open/ftruncate/close instead, no data written (names and sizes are all a walk or the rstats
    read, so the comparison is the same; only the set-up is cheaper)."""
    root, first, count, per_dir, sparse = job
    d = root / f"run_{first // (per_dir * 100):03d}" / f"step_{(first // per_dir) % 100:03d}"
    d.mkdir(parents=True, exist_ok=True)
    total = 0
    for i in range(first, first + count):
        size = 100 + i % 900
        fd = os.open(d / f"f{i:07d}.bin", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        if sparse:
            os.ftruncate(fd, size)
        else:
            os.write(fd, b"x" * size)
            os.fsync(fd)
        os.close(fd)
        total += size
    return total


def build(root: Path, files: int, per_dir: int, procs: int, sparse: bool) -> tuple[int, int]:
    """The tree, one step directory per task, `procs` processes writing at once."""
    jobs = [(root, first, min(per_dir, files - first), per_dir, sparse) for first in range(0, files, per_dir)]
    total, started = 0, time.monotonic()
    with multiprocessing.Pool(procs) as pool:
        for done, size in enumerate(pool.imap_unordered(build_dir, jobs), 1):
            total += size
            if done % max(1, len(jobs) // 20) == 0:  # every 5 %: the rate, to judge a long set-up early
                took = time.monotonic() - started
                print(f"{done * per_dir} files, {took:.0f} s", file=sys.stderr, flush=True)
    return total, files


def remove(root: Path, procs: int) -> None:
    runs = sorted(root.iterdir()) if root.exists() else []
    with multiprocessing.Pool(procs) as pool:
        pool.map(shutil.rmtree, runs)
    shutil.rmtree(root, ignore_errors=True)


def walk_usage(root: Path) -> tuple[int, int]:
    store = open_store(TierConfig(name="b", url=root.as_uri(), role="plain"))
    size = files = 0
    for e in store.walk(""):
        if not e.is_dir:
            size += e.size
            files += 1
    return size, files


def rstat_usage(root: Path) -> tuple[int, int]:
    u = CephFs().usage(str(root))
    assert u is not None
    return u.bytes, u.files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--per-dir", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--procs", type=int, default=8, help="processes creating (and removing) the files")
    ap.add_argument("--sparse", action="store_true", help="size the files by ftruncate, write no data")
    ap.add_argument("--settle-s", type=float, default=120, help="how long to wait for the rstats")
    ap.add_argument("--keep", action="store_true", help="leave the tree (a cluster thrown away next)")
    args = ap.parse_args()
    m1, m2 = (Path(os.environ[f"STOREKIT_TEST_CEPHFS_MOUNT{i}"]) for i in (1, 2))
    name = f"bench-usage-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    want = build(m1 / name, args.files, args.per_dir, args.procs, args.sparse)
    built = time.monotonic() - t0
    print(f"built {args.files} files in {built:.1f} s", file=sys.stderr, flush=True)
    try:
        deadline = time.monotonic() + args.settle_s
        while rstat_usage(m2 / name) != want and time.monotonic() < deadline:
            time.sleep(0.5)
        settled = time.monotonic() - t0 - built
        assert rstat_usage(m2 / name) == want, (rstat_usage(m2 / name), want)
        walks, reads = [], []
        for _ in range(args.rounds):
            t = time.perf_counter()
            assert walk_usage(m2 / name) == want  # each timed walk is also the check of the totals
            walks.append(time.perf_counter() - t)
            print(f"walk {walks[-1]:.1f} s", file=sys.stderr, flush=True)
            t = time.perf_counter()
            rstat_usage(m2 / name)
            reads.append(time.perf_counter() - t)
        print(
            json.dumps(
                {
                    "files": args.files,
                    "bytes": want[0],
                    "sparse": args.sparse,
                    "build_s": round(built, 1),
                    "rstats_settled_s": round(settled, 1),
                    "walk_s": [round(x, 3) for x in walks],
                    "rstat_s": [round(x, 6) for x in reads],
                    "walk_median_s": round(statistics.median(walks), 3),
                    "rstat_median_s": round(statistics.median(reads), 6),
                    "speedup": round(statistics.median(walks) / statistics.median(reads)),
                },
                indent=1,
            )
        )
    finally:
        if not args.keep:
            remove(m1 / name, args.procs)


if __name__ == "__main__":
    main()
