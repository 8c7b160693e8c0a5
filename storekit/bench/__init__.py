"""`storekit bench io`: parallel I/O benchmarks in training terms (shards, checkpoint, tokens, meta).

spec (validated BenchSpec) -> plan (files and bytes per worker) -> runner (process workers on a barrier)
-> stats (mergeable histograms, time series) -> report (table, JSON, Prometheus, plot) -> verdict.
"""
