"""Mergeable measurements: latency histograms, progress traces, and what a phase adds up to.

Histograms are HDR-style: log-linear buckets (64 sub-buckets per power of two, <1.6% relative width)
in nanoseconds. Merging is element-wise addition, so the merge of per-worker (or per-host) histograms
is exactly the histogram of all samples, and percentiles always come from a merged histogram; averaging
per-worker percentiles is meaningless and never done.

Progress traces count bytes and operations in 10 ms buckets of wall-clock time; they give the 1 s time
series and the "all workers active" (stonewall) rate, and merge across hosts whose clocks are synced.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SUB_BITS = 6
SUB = 1 << SUB_BITS
MAX_SHIFT = 42  # values up to ~2^48 ns (3 days) get their own buckets; larger ones share the last
N_BUCKETS = (MAX_SHIFT + 2) * SUB
FINE_NS = 10_000_000  # progress trace resolution
SERIES_NS = 1_000_000_000  # time series resolution
MIN_STONEWALL_NS = 50_000_000  # shorter all-active windows are too short to rate
MODE_GAP = 3.0  # repeats whose sorted values jump by this factor or more form separate modes


def bucket_index(value_ns: int) -> int:
    if value_ns < 2 * SUB:
        return max(value_ns, 0)
    shift = value_ns.bit_length() - 1 - SUB_BITS
    return min((shift + 1) * SUB + (value_ns >> shift) - SUB, N_BUCKETS - 1)


def bucket_indices(values_ns: np.ndarray) -> np.ndarray:
    values = np.maximum(values_ns.astype(np.int64), 0)
    _, exp = np.frexp(values.astype(np.float64))  # exact bit_length for values < 2^53
    shift = np.maximum(exp.astype(np.int64) - 1 - SUB_BITS, 0)
    big = (shift + 1) * SUB + (values >> shift) - SUB
    idx = np.where(values < 2 * SUB, values, big)
    return np.minimum(idx, N_BUCKETS - 1)


def bucket_bounds(index: int) -> tuple[int, int]:
    """[low, high] values that land in bucket `index`."""
    if index < 2 * SUB:
        return index, index
    shift = index // SUB - 1
    low = (SUB + index % SUB) << shift
    return low, low + (1 << shift) - 1


class LatencyHistogram:
    """Counts of latencies (ns) in log-linear buckets, plus exact count, sum, min and max.

    Single samples go to a Python list (cheap per call), batches to a numpy array (cheap per batch).
    """

    def __init__(self) -> None:
        self._single = [0] * N_BUCKETS
        self._batched = np.zeros(N_BUCKETS, dtype=np.int64)
        self.total_ns = 0
        self.min_ns: int | None = None
        self.max_ns: int | None = None

    @property
    def counts(self) -> np.ndarray:
        return self._batched + np.asarray(self._single, dtype=np.int64)

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    def record(self, value_ns: int) -> None:
        self._single[bucket_index(value_ns)] += 1
        self.total_ns += value_ns
        if self.min_ns is None or value_ns < self.min_ns:
            self.min_ns = value_ns
        if self.max_ns is None or value_ns > self.max_ns:
            self.max_ns = value_ns

    def record_many(self, values_ns: np.ndarray) -> None:
        if values_ns.size <= 4:  # numpy's per-call cost beats the per-value loop only for batches
            for value in values_ns.tolist():
                self.record(int(value))
            return
        self._batched += np.bincount(bucket_indices(values_ns), minlength=N_BUCKETS)
        self.total_ns += int(values_ns.sum())
        low, high = int(values_ns.min()), int(values_ns.max())
        self.min_ns = low if self.min_ns is None else min(self.min_ns, low)
        self.max_ns = high if self.max_ns is None else max(self.max_ns, high)

    def merge(self, other: LatencyHistogram) -> LatencyHistogram:
        self._batched += other.counts
        self.total_ns += other.total_ns
        for value in (other.min_ns, other.max_ns):
            if value is not None:
                self.min_ns = value if self.min_ns is None else min(self.min_ns, value)
                self.max_ns = value if self.max_ns is None else max(self.max_ns, value)
        return self

    def percentile(self, q: float) -> float | None:
        """The q-th percentile (0-100) as the middle of its bucket, clamped to the exact min/max."""
        n = self.count
        if n == 0 or self.min_ns is None or self.max_ns is None:
            return None
        rank = max(1, int(np.ceil(q / 100.0 * n)))
        index = int(np.searchsorted(np.cumsum(self.counts), rank))
        low, high = bucket_bounds(index)
        return float(min(max((low + high) / 2.0, self.min_ns), self.max_ns))

    def summary_ms(self) -> dict[str, float | int | None]:
        def ms(v: float | None) -> float | None:
            return None if v is None else round(v / 1e6, 6)

        n = self.count
        return {
            "count": n,
            "mean_ms": ms(self.total_ns / n) if n else None,
            "min_ms": ms(self.min_ns),
            "p50_ms": ms(self.percentile(50)),
            "p90_ms": ms(self.percentile(90)),
            "p99_ms": ms(self.percentile(99)),
            "p99_9_ms": ms(self.percentile(99.9)),
            "max_ms": ms(self.max_ns),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "sub_bits": SUB_BITS,
            "buckets": [[int(i), int(self.counts[i])] for i in np.flatnonzero(self.counts)],
            "total_ns": self.total_ns,
            "min_ns": self.min_ns,
            "max_ns": self.max_ns,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatencyHistogram:
        if data.get("sub_bits") != SUB_BITS:
            raise ValueError(f"histogram with sub_bits={data.get('sub_bits')}; expected {SUB_BITS}")
        hist = cls()
        for index, c in data["buckets"]:
            hist._batched[int(index)] += int(c)
        hist.total_ns = int(data["total_ns"])
        hist.min_ns = data["min_ns"]
        hist.max_ns = data["max_ns"]
        return hist


@dataclass
class ProgressTrace:
    """Bytes and operations completed per 10 ms of wall-clock time, from bucket `origin` on."""

    origin: int = -1  # absolute bucket number (wall-clock ns // FINE_NS)
    bytes: list[int] = field(default_factory=list)
    ops: list[int] = field(default_factory=list)

    def _cover(self, first: int, last: int) -> None:
        """Make buckets first..last (absolute numbers) addressable."""
        if self.origin < 0:
            self.origin = first
        if first < self.origin:  # an earlier sample (merging threads or hosts): extend to the left
            pad = self.origin - first
            self.bytes[:0] = [0] * pad
            self.ops[:0] = [0] * pad
            self.origin = first
        grow = last - self.origin + 1 - len(self.bytes)
        if grow > 0:
            self.bytes.extend([0] * grow)
            self.ops.extend([0] * grow)

    def add(self, wall_ns: int, nbytes: int, nops: int = 1) -> None:
        bucket = wall_ns // FINE_NS
        if self.origin < 0 or not self.origin <= bucket < self.origin + len(self.bytes):
            self._cover(bucket, bucket)
        offset = bucket - self.origin
        self.bytes[offset] += nbytes
        self.ops[offset] += nops

    def add_many(self, wall_ns: np.ndarray, nbytes: np.ndarray) -> None:
        """One operation per element, completed at wall_ns, moving nbytes."""
        if wall_ns.size == 0:
            return
        buckets = wall_ns // FINE_NS
        self._cover(int(buckets.min()), int(buckets.max()))
        offsets = buckets - self.origin
        size = int(offsets.max()) + 1
        moved = np.bincount(offsets, weights=nbytes, minlength=size).astype(np.int64).tolist()
        done = np.bincount(offsets, minlength=size).tolist()
        lo = int(offsets.min())
        for i in range(lo, size):
            self.bytes[i] += moved[i]
            self.ops[i] += done[i]

    def merge(self, other: ProgressTrace) -> ProgressTrace:
        for offset, (b, o) in enumerate(zip(other.bytes, other.ops, strict=True)):
            if b or o:
                self.add((other.origin + offset) * FINE_NS, b, o)
        return self

    def amount_between(self, start_ns: int, end_ns: int) -> tuple[float, float]:
        """Bytes and ops completed in [start, end), spreading each bucket's count over its 10 ms."""
        total_b = total_o = 0.0
        for offset, (b, o) in enumerate(zip(self.bytes, self.ops, strict=True)):
            low = (self.origin + offset) * FINE_NS
            overlap = min(end_ns, low + FINE_NS) - max(start_ns, low)
            if overlap > 0:
                total_b += b * overlap / FINE_NS
                total_o += o * overlap / FINE_NS
        return total_b, total_o

    def to_dict(self) -> dict[str, Any]:
        return {"origin": self.origin, "bucket_ns": FINE_NS, "bytes": self.bytes, "ops": self.ops}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProgressTrace:
        return cls(origin=int(data["origin"]), bytes=list(data["bytes"]), ops=list(data["ops"]))


_NICE_BUCKETS_NS = [k * FINE_NS for k in (1, 2, 5, 10, 20, 50, 100)]  # 10 ms ... 1 s
SERIES_POINTS = 50


def series_bucket_ns(duration_ns: int) -> int:
    """1 s buckets for phases of a minute or more; finer ones (down to the traces' 10 ms) for shorter
    phases, so a sub-second phase still shows its shape instead of a single point."""
    for bucket in _NICE_BUCKETS_NS:
        if bucket * SERIES_POINTS >= duration_ns:
            return bucket
    return SERIES_NS


def series(
    traces: Iterable[ProgressTrace], start_ns: int, end_ns: int, bucket_ns: int = SERIES_NS
) -> list[dict[str, float]]:
    """Merged buckets of `bucket_ns` from `start_ns`: bytes and ops per second, to expose throttling."""
    n = max(1, -(-(end_ns - start_ns) // bucket_ns))
    out_b = [0.0] * n
    out_o = [0.0] * n
    for trace in traces:
        for offset, (b, o) in enumerate(zip(trace.bytes, trace.ops, strict=True)):
            slot = ((trace.origin + offset) * FINE_NS - start_ns) // bucket_ns
            slot = min(max(slot, 0), n - 1)
            out_b[slot] += b
            out_o[slot] += o
    rows = []
    for i in range(n):
        width = min(bucket_ns, end_ns - start_ns - i * bucket_ns) / 1e9
        width = max(width, 1e-3)
        t_s = round(i * bucket_ns / 1e9, 6)
        rows.append({"t_s": t_s, "bytes_per_s": out_b[i] / width, "ops_per_s": out_o[i] / width})
    return rows


def median_spread(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and relative spread ((max-min)/median) of repeated measurements, and the
    modes when the repeats fall into separate groups (see `modes`)."""
    clean = [v for v in values if v is not None]
    if not clean:
        return {"median": None, "min": None, "max": None, "spread": None, "modes": None}
    med = statistics.median(clean)
    return {
        "median": med,
        "min": min(clean),
        "max": max(clean),
        "spread": (max(clean) - min(clean)) / med if med else None,
        "modes": modes(clean),
    }


def modes(values: Sequence[float], gap: float = MODE_GAP) -> list[dict[str, float]] | None:
    """Groups of values separated by jumps of `gap`x or more between neighbours in sorted order,
    smallest values first, as {median, count, min, max}; None when the values form one group.

    A bimodal measurement (e.g. an empty-file create costing 30 us or 0.7 ms depending on what the
    filesystem did seconds earlier) has no meaningful median: it jumps between the modes from run to
    run. Each mode's own median is what can be compared."""
    ordered = sorted(v for v in values if v is not None and v > 0)
    if len(ordered) < 2:
        return None
    groups: list[list[float]] = [[ordered[0]]]
    for prev, value in itertools.pairwise(ordered):
        if value >= prev * gap:
            groups.append([])
        groups[-1].append(value)
    if len(groups) == 1:
        return None
    return [{"median": statistics.median(g), "count": len(g), "min": g[0], "max": g[-1]} for g in groups]
