"""Exact dedup across tasks: the first occurrence in plan order wins, whatever ran where or when.

Each task wrote its kept documents' hashes sorted. The hash space is cut into buckets sized so one
bucket of all tasks fits comfortably in memory. One pass reads each task's hashes once and appends
every bucket's slice, tagged (task << 32 | doc), to that bucket's spill file; then per bucket,
entries are sorted by (hash, task, doc) and every entry equal to its predecessor is a later
occurrence: dropped. Drops go to one file of sorted keys per bucket, mapped once and searched per
task at assembly. File opens grow as tasks + buckets, not tasks x buckets (10,000 tasks on Lustre:
each open is a metadata server round trip). Memory is bounded by the bucket size, not the corpus.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import numpy as np

from storekit.pipeline.taskparts import HASH_DTYPE

BUCKET_ENTRIES = 4_000_000
OPEN_BUCKETS = 256  # spill files open at once; more buckets take another pass over the tasks
SPILL_DTYPE = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("key", "<u8")])
_SPACE = 1 << 64


class DropIndex:
    """Documents (per task, by index among the task's kept documents) that are later duplicates."""

    def __init__(self, files: Sequence[Path]) -> None:
        self.files = list(files)
        self._keys = [np.fromfile(f, dtype=np.uint64) for f in self.files]  # each opened once
        self.count = sum(len(k) for k in self._keys)

    def for_task(self, task: int) -> np.ndarray:
        lo, hi = np.uint64(task << 32), np.uint64((task + 1) << 32)
        parts = []
        for keys in self._keys:
            a, b = np.searchsorted(keys, lo), np.searchsorted(keys, hi)
            if b > a:
                parts.append((keys[a:b] & np.uint64(0xFFFFFFFF)).astype(np.int64))
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return np.sort(np.concatenate(parts))


def find_cross_task_duplicates(hash_files: Sequence[Path], out_dir: Path) -> DropIndex:
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    total = sum(_entries(p) for p in hash_files)
    buckets = max(1, -(-total // BUCKET_ENTRIES))
    edges = [np.uint64(_SPACE * b // buckets) for b in range(buckets)]
    files = []
    for first in range(0, buckets, OPEN_BUCKETS):
        group = range(first, min(first + OPEN_BUCKETS, buckets))
        _spill(hash_files, edges, group, buckets, out_dir)
        for b in group:
            spill = out_dir / f"spill-{b:05d}.rec"
            files.append(_bucket_drops(spill, out_dir / f"drops-{b:05d}.u64"))
            spill.unlink()
    return DropIndex(files)


def _spill(hash_files: Sequence[Path], edges: list[np.uint64], group: range, buckets: int, out: Path) -> None:
    """Each task's hashes read once; each bucket's slice appended to its spill file, tagged."""
    sinks: dict[int, IO[bytes]] = {b: open(out / f"spill-{b:05d}.rec", "wb") for b in group}  # noqa: SIM115
    try:
        for task, path in enumerate(hash_files):
            table = _load_hashes(path)
            if not len(table):
                continue
            for b in group:
                start = np.searchsorted(table["hi"], edges[b]) if b else 0
                stop = np.searchsorted(table["hi"], edges[b + 1]) if b + 1 < buckets else len(table)
                if stop <= start:
                    continue
                part = np.asarray(table[start:stop])
                rec = np.empty(len(part), dtype=SPILL_DTYPE)
                rec["hi"], rec["lo"] = part["hi"], part["lo"]
                rec["key"] = (np.uint64(task) << np.uint64(32)) | part["doc"].astype(np.uint64)
                sinks[b].write(rec.tobytes())
    finally:
        for fh in sinks.values():
            fh.close()


def _bucket_drops(spill: Path, out_path: Path) -> Path:
    rec = np.fromfile(spill, dtype=SPILL_DTYPE)
    keys = np.zeros(0, dtype=np.uint64)
    if len(rec):
        order = np.lexsort((rec["key"], rec["lo"], rec["hi"]))
        hi, lo, key = rec["hi"][order], rec["lo"][order], rec["key"][order]
        later = np.nonzero((hi[1:] == hi[:-1]) & (lo[1:] == lo[:-1]))[0] + 1
        keys = np.sort(key[later])
    out_path.write_bytes(keys.tobytes())
    return out_path


def _entries(path: Path) -> int:
    try:
        return path.stat().st_size // HASH_DTYPE.itemsize
    except FileNotFoundError:
        return 0


def _load_hashes(path: Path) -> np.ndarray:
    try:
        return np.fromfile(path, dtype=HASH_DTYPE)  # read whole, once: a task's hashes are small
    except FileNotFoundError:
        return np.zeros(0, dtype=HASH_DTYPE)
