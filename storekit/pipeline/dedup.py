"""Exact dedup across tasks: the first occurrence in plan order wins, whatever ran where or when.

Each task wrote its kept documents' hashes sorted. Here the hash space is cut into buckets sized so
one bucket of all tasks fits comfortably in memory; per bucket, entries are sorted by (hash, task,
doc) and every entry equal to its predecessor is a later occurrence: dropped. Drops go to one file of
sorted (task << 32 | doc) keys per bucket, read back per task at assembly. Memory is bounded by the
bucket size, not the corpus size.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from storekit.pipeline.taskparts import HASH_DTYPE

BUCKET_ENTRIES = 4_000_000
_SPACE = 1 << 64


def _load_hashes(path: Path) -> np.ndarray:
    if not path.is_file() or path.stat().st_size == 0:
        return np.zeros(0, dtype=HASH_DTYPE)
    return np.memmap(path, dtype=HASH_DTYPE, mode="r")


class DropIndex:
    """Documents (per task, by index among the task's kept documents) that are later duplicates."""

    def __init__(self, files: Sequence[Path]) -> None:
        self.files = list(files)
        self.count = 0
        for f in self.files:
            self.count += f.stat().st_size // 8

    def for_task(self, task: int) -> np.ndarray:
        lo, hi = np.uint64(task << 32), np.uint64((task + 1) << 32)
        parts = []
        for f in self.files:
            if f.stat().st_size == 0:
                continue
            keys = np.memmap(f, dtype=np.uint64, mode="r")
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
    total = sum(p.stat().st_size // HASH_DTYPE.itemsize for p in hash_files if p.is_file())
    buckets = max(1, -(-total // BUCKET_ENTRIES))
    edges = [np.uint64(_SPACE * b // buckets) for b in range(buckets)]
    files = []
    for b in range(buckets):
        his, los, tasks, docs = [], [], [], []
        for task, path in enumerate(hash_files):
            # mapped per bucket and dropped after: pages touched for earlier buckets do not pile up
            table = _load_hashes(path)
            if not len(table):
                continue
            start = np.searchsorted(table["hi"], edges[b]) if b else 0
            stop = np.searchsorted(table["hi"], edges[b + 1]) if b + 1 < buckets else len(table)
            if stop <= start:
                continue
            part = np.asarray(table[start:stop])
            his.append(part["hi"])
            los.append(part["lo"])
            docs.append(part["doc"].astype(np.uint64))
            tasks.append(np.full(stop - start, task, dtype=np.uint64))
        out_path = out_dir / f"drops-{b:05d}.u64"
        keys = np.zeros(0, dtype=np.uint64)
        if his:
            hi, lo = np.concatenate(his), np.concatenate(los)
            task_col, doc_col = np.concatenate(tasks), np.concatenate(docs)
            order = np.lexsort((doc_col, task_col, lo, hi))
            hi, lo = hi[order], lo[order]
            later = np.nonzero((hi[1:] == hi[:-1]) & (lo[1:] == lo[:-1]))[0] + 1
            keys = np.sort((task_col[order][later] << np.uint64(32)) | doc_col[order][later])
        out_path.write_bytes(keys.tobytes())
        files.append(out_path)
    return DropIndex(files)
