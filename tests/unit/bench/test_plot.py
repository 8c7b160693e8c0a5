"""The bench plot: panels only for swept axes, one series per combination of the other differing
parameters, human units, op/s apart from bytes/s, time series at the phase's own scale."""

from __future__ import annotations

from typing import Any

import pytest

from storekit.bench.stats import FINE_NS, SERIES_NS, series_bucket_ns
from storekit.units import format_bytes

plot = pytest.importorskip("storekit.bench.plot", reason="matplotlib (storekit[plot]) is not installed")


def phase(name: str, op: str, rate: float) -> dict[str, Any]:
    stat = {"median": rate, "min": rate * 0.9, "max": rate * 1.1, "spread": 0.2}
    rows = [{"t_s": i * 0.01, "bytes_per_s": rate, "ops_per_s": 10.0} for i in range(30)]
    return {
        "phase": name,
        "op": op,
        "summary": {"bandwidth_bytes_per_s": stat, "ops_per_s": stat},
        "repeats": [{"series": rows, "series_bucket_s": 0.01}],
    }


def point(pattern: str, label: str, params: dict[str, Any], *phases: dict[str, Any]) -> dict[str, Any]:
    return {"pattern": pattern, "label": label, "params": params, "phases": list(phases)}


def doc() -> dict[str, Any]:
    results = []
    for w in (1, 2):
        results.append(point("shards", f"w={w}", {"workers": w, "block_size": 1 << 20},
                             phase("write", "write", 1e9 * w), phase("read", "read", 2e9 * w)))  # fmt: skip
        for qd in (1, 32):
            params = {"workers": w, "queue_depth": qd, "window": 8192}
            results.append(
                point("tokens", f"w={w} qd={qd}", params, phase("randread", "randread", 1e8 * w * qd))
            )
        results.append(point("meta", f"w={w}", {"workers": w, "dirs": "unique"},
                             phase("create", "create", 5000.0), phase("stat", "stat", 20000.0)))  # fmt: skip
    return {"results": results, "environment": {"target": "/x"}, "run_id": "r1"}


def test_only_swept_axes_get_panels_and_series_keep_other_parameters_apart() -> None:
    panels = {title: (axis, data, lines) for title, axis, data, lines in plot.sweep_panels(doc())}
    assert set(panels) == {
        "shards: throughput vs workers",
        "tokens: throughput vs workers",
        "tokens: throughput vs queue depth",
    }  # fmt: skip  (one block size: no block-size panel; meta rates are bars, not GB/s lines)
    _, _, lines = panels["tokens: throughput vs workers"]
    assert [line.label for line in lines] == ["randread qd=1", "randread qd=32"]  # not one zig-zag line
    assert [p[0] for p in lines[1].points] == [1.0, 2.0]
    _, _, shard_lines = panels["shards: throughput vs workers"]
    assert [line.label for line in shard_lines] == ["read", "write"]


def test_human_units() -> None:
    assert plot.human_param("block_size", 1 << 20) == "bs=1 MiB"
    assert plot.human_param("window", 8192) == "window=8 KiB"
    assert format_bytes(1536, compact=True) == "1.5 KiB" and plot.human_param("queue_depth", 32) == "qd=32"


def test_series_buckets_follow_the_phases_duration() -> None:
    assert series_bucket_ns(300_000_000) == FINE_NS  # 0.3 s: 10 ms buckets
    assert series_bucket_ns(2_500_000_000) == 5 * FINE_NS  # 2.5 s: 50 ms
    assert series_bucket_ns(120 * SERIES_NS) == SERIES_NS  # 2 min: 1 s


def test_png_is_drawn() -> None:
    data = plot.render_png(doc())
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
