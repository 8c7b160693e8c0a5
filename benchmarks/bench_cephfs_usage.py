"""An area's usage on CephFS: `storekit status` walking the tree (what it does on any POSIX tier)
against reading the file system's recursive statistics (ceph.dir.rbytes/rfiles, what it does on CephFS
now), on the same tree of N small files, read through the OTHER mount (a node that did not write them).

    eval "$(scripts/services/cephfs-up.sh)"
    /work/main/.venv/bin/python benchmarks/bench_cephfs_usage.py --files 10000 --rounds 3

The issue asks for 1M files; on this 2-core host creating them through ceph-fuse takes ~1 h, so the
default is 10,000 (~40 s of set-up, ~1.5 min in all) and the walk's cost grows linearly with N while the
rstat read does not change. The tree is built under the first mount in a fresh directory, both
ways are checked to give the same totals (after the MDS has propagated the rstats), then each is
timed `--rounds` times, alternating, on the second mount. The tree is removed at the end.
"""

from __future__ import annotations

import argparse
import json
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


def build(root: Path, files: int, per_dir: int) -> tuple[int, int]:
    total = 0
    for i in range(files):
        d = root / f"run_{i // (per_dir * 100):03d}" / f"step_{(i // per_dir) % 100:03d}"
        if i % per_dir == 0:
            d.mkdir(parents=True, exist_ok=True)
        size = 100 + i % 900
        with open(d / f"f{i:07d}.bin", "wb") as fh:
            fh.write(b"x" * size)
        total += size
    return total, files


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
    args = ap.parse_args()
    m1, m2 = (Path(os.environ[f"STOREKIT_TEST_CEPHFS_MOUNT{i}"]) for i in (1, 2))
    name = f"bench-usage-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    want = build(m1 / name, args.files, args.per_dir)
    for fh_dir, _, names in os.walk(m1 / name):  # flush sizes to the MDS (rstats count flushed sizes)
        for n in names:
            fd = os.open(os.path.join(fh_dir, n), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    built = time.monotonic() - t0
    try:
        deadline = time.monotonic() + 120
        while rstat_usage(m2 / name) != want and time.monotonic() < deadline:
            time.sleep(0.5)
        settled = time.monotonic() - t0 - built
        assert rstat_usage(m2 / name) == want, (rstat_usage(m2 / name), want)
        assert walk_usage(m2 / name) == want
        walks, reads = [], []
        for _ in range(args.rounds):
            t = time.perf_counter()
            walk_usage(m2 / name)
            walks.append(time.perf_counter() - t)
            t = time.perf_counter()
            rstat_usage(m2 / name)
            reads.append(time.perf_counter() - t)
        print(
            json.dumps(
                {
                    "files": args.files,
                    "bytes": want[0],
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
        shutil.rmtree(m1 / name, ignore_errors=True)


if __name__ == "__main__":
    main()
