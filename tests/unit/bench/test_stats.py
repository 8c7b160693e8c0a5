"""Histograms merge exactly; percentiles come from merged histograms within one bucket's error."""

from __future__ import annotations

import json

import numpy as np
import pytest

from storekit.bench.stats import (
    FINE_NS,
    N_BUCKETS,
    SUB,
    LatencyHistogram,
    ProgressTrace,
    bucket_bounds,
    bucket_index,
    bucket_indices,
    median_spread,
    modes,
    series,
)

RELATIVE_BUCKET_ERROR = 1 / SUB  # a bucket is at most 1/64 of its value wide


def samples(n: int = 20_000, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # latency-like: log-normal around 200 us with a long tail, plus a few tiny and huge values
    body = rng.lognormal(mean=np.log(200_000), sigma=1.2, size=n).astype(np.int64)
    return np.concatenate([body, np.array([0, 1, 127, 128, 129, 2**40 + 12345])])


def test_scalar_and_vector_bucketing_agree_and_bounds_contain_the_value() -> None:
    values = np.concatenate([np.arange(0, 5000), samples(5000), 2 ** np.arange(0, 50, dtype=np.int64)])
    vector = bucket_indices(values)
    for value, index in zip(values.tolist(), vector.tolist(), strict=True):
        assert bucket_index(value) == index
        if index < N_BUCKETS - 1:
            low, high = bucket_bounds(index)
            assert low <= value <= high
            assert high - low <= max(value * RELATIVE_BUCKET_ERROR, 0)


def test_merging_per_worker_histograms_equals_one_histogram_of_all_samples() -> None:
    data = samples()
    whole = LatencyHistogram()
    whole.record_many(data)
    parts = np.array_split(data, 7)
    merged = LatencyHistogram()
    for i, part in enumerate(parts):
        worker = LatencyHistogram()
        if i % 2:  # some workers record one sample at a time, others in batches
            for v in part.tolist():
                worker.record(v)
        else:
            worker.record_many(part)
        # results travel between processes (and hosts) as JSON
        shipped = LatencyHistogram.from_dict(json.loads(json.dumps(worker.to_dict())))
        merged.merge(shipped)
    assert np.array_equal(merged.counts, whole.counts)
    assert merged.count == len(data)
    assert merged.total_ns == int(data.sum())
    assert (merged.min_ns, merged.max_ns) == (int(data.min()), int(data.max()))
    for q in (1, 50, 90, 99, 99.9, 100):
        assert merged.percentile(q) == whole.percentile(q)


@pytest.mark.parametrize("q", [50, 90, 99, 99.9])
def test_percentiles_are_within_one_bucket_of_the_exact_value(q: float) -> None:
    data = samples(50_000, seed=3)
    hist = LatencyHistogram()
    hist.record_many(data)
    exact = float(np.percentile(data, q, method="inverted_cdf"))
    got = hist.percentile(q)
    assert got is not None
    assert abs(got - exact) <= exact * RELATIVE_BUCKET_ERROR + 1


def test_averaging_per_worker_percentiles_would_be_wrong_and_merging_is_not() -> None:
    fast = np.full(9_000, 100_000, dtype=np.int64)  # 100 us
    slow = np.full(1_000, 10_000_000, dtype=np.int64)  # 10 ms
    a, b = LatencyHistogram(), LatencyHistogram()
    a.record_many(fast)
    b.record_many(slow)
    averaged = ((a.percentile(99) or 0) + (b.percentile(99) or 0)) / 2
    merged = LatencyHistogram().merge(a).merge(b)
    assert merged.percentile(99) == pytest.approx(10_000_000, rel=RELATIVE_BUCKET_ERROR)
    assert abs(averaged - 10_000_000) > 4_000_000  # the naive answer is far off


def test_summary_of_an_empty_histogram_has_no_numbers() -> None:
    summary = LatencyHistogram().summary_ms()
    assert summary["count"] == 0
    assert summary["p99_ms"] is None and summary["mean_ms"] is None


def test_progress_trace_spreads_buckets_over_a_window_and_merges() -> None:
    t0 = 1_000 * FINE_NS
    trace = ProgressTrace()
    for i in range(100):  # 1 MB per 10 ms for one second
        trace.add(t0 + i * FINE_NS + 5, 1_000_000)
    b, o = trace.amount_between(t0 + 25 * FINE_NS, t0 + 75 * FINE_NS)
    assert b == pytest.approx(50_000_000)
    assert o == pytest.approx(50)
    half = ProgressTrace.from_dict(trace.to_dict())
    half.merge(trace)
    assert sum(half.bytes) == 200_000_000


def test_series_has_one_second_buckets_that_add_up() -> None:
    t0 = 5_000 * FINE_NS
    a, b = ProgressTrace(), ProgressTrace()
    for i in range(250):  # 2.5 s
        a.add(t0 + i * FINE_NS, 1000)
        b.add(t0 + i * FINE_NS, 3000)
    rows = series([a, b], t0, t0 + 250 * FINE_NS)
    assert [r["t_s"] for r in rows] == [0.0, 1.0, 2.0]
    assert rows[0]["bytes_per_s"] == pytest.approx(400_000)
    assert rows[2]["bytes_per_s"] == pytest.approx(50 * 4000 / 0.5)  # last bucket is half a second


def test_median_spread() -> None:
    assert median_spread([10.0, 12.0, 8.0]) == {
        "median": 10.0,
        "min": 8.0,
        "max": 12.0,
        "spread": 0.4,
        "modes": None,
    }
    assert median_spread([])["median"] is None


def test_bimodal_repeats_report_each_mode_instead_of_a_median_between_them() -> None:
    # empty-file creates on ext4 without a journal: ~35,000/s, or ~1,400/s within 30 s of deleting
    # many files in the same block group (the allocator skips recently deleted inodes one by one)
    rates = [1_380.0, 35_000.0, 1_400.0, 1_350.0, 33_000.0, 1_420.0, 1_390.0]
    out = median_spread(rates)
    assert out["median"] == 1_400.0
    assert out["modes"] == [
        {"median": 1_390.0, "count": 5, "min": 1_350.0, "max": 1_420.0},
        {"median": 34_000.0, "count": 2, "min": 33_000.0, "max": 35_000.0},
    ]
    assert modes([100.0, 130.0, 160.0, 250.0]) is None  # 2.5x from end to end, no 3x jump
    assert modes([1.0, 2.9, 8.6, 25.0]) is None  # a chain of steps under 3x is one spread-out group
    assert modes([10.0, 30.0]) == [
        {"median": 10.0, "count": 1, "min": 10.0, "max": 10.0},
        {"median": 30.0, "count": 1, "min": 30.0, "max": 30.0},
    ]
    assert modes([5.0]) is None and modes([]) is None
