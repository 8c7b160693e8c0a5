"""Report outputs: the schema validator, Prometheus text, atomic writes, the verdict."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from storekit.bench import schema
from storekit.bench.report import bench_prometheus_text, write_atomic
from storekit.bench.spec import TargetSpec, build_spec
from storekit.bench.verdict import judge, verdict_lines
from storekit.cli.bench_tables import render_human


def summary(bandwidth: float | None, ops: float = 10.0) -> dict[str, Any]:
    ms = {"median": bandwidth, "min": bandwidth, "max": bandwidth, "spread": 0.0}
    lat = {k: 1.0 for k in ("mean_ms", "min_ms", "p50_ms", "p90_ms", "p99_ms", "p99_9_ms", "max_ms")}
    return {
        "bandwidth_bytes_per_s": ms,
        "ops_per_s": {"median": ops, "min": ops, "max": ops, "spread": 0.0},
        "stonewall_bandwidth_bytes_per_s": ms,
        "latency": {"count": 5, **lat},
        "cpu_cores_used": {"median": 0.5, "min": 0.5, "max": 0.5, "spread": 0.0},
    }


def point(pattern: str, label: str, phase: str, bandwidth: float, **params: Any) -> dict[str, Any]:
    return {
        "pattern": pattern,
        "label": label,
        "params": params,
        "phases": [{"phase": phase, "op": phase, "summary": summary(bandwidth)}],
    }


def test_verdict_scales_the_checkpoint_and_counts_gpus_fed() -> None:
    spec = build_spec(TargetSpec(kind="posix", root="/x"), model="7b", ranks=8, gpu_tokens_per_s=10_000,
                      gpus=100, target_checkpoint_s=60)  # fmt: skip
    points = [
        point("checkpoint", "ranks=8 bs=1M", "write", 2e9, ranks=8),
        point("checkpoint", "ranks=8 bs=4M", "write", 4e9, ranks=8),  # the best block size counts
        point("checkpoint", "ranks=8 bs=4M", "read", 8e9, ranks=8),
        point("tokens", "w=4 qd=32", "randread", 1e9, workers=4),
        point("shards", "w=4", "read", 3e9, workers=4),
    ]
    v = judge(spec, points)
    ckpt_bytes = int(6.74e9 * 14)
    assert v["checkpoint"]["save_s"] == pytest.approx(ckpt_bytes / 4e9)
    assert v["checkpoint"]["load_s"] == pytest.approx(ckpt_bytes / 8e9)
    assert v["checkpoint"]["measured_at"] == "ranks=8 bs=4M"
    assert v["checkpoint"]["pass"] is True  # 23.6 s <= 60 s
    loader = v["data"][0]
    assert loader["pattern"] == "tokens" and loader["gpus_fed"] == pytest.approx(1e9 / (10_000 * 2))
    assert v["pass"] is True
    strict = judge(
        build_spec(TargetSpec(kind="posix", root="/x"), gpus=100_000, gpu_tokens_per_s=10_000), points
    )
    assert strict["pass"] is False  # 50,000 GPUs fed, 100,000 asked for
    assert any("FAIL" in line for line in verdict_lines(strict))


def test_prometheus_text_escapes_labels_and_declares_every_metric(promtool: Callable[[str], None]) -> None:
    doc = {
        "environment": {"target": 'weird "path"\\x'},
        "config_hash": "abc",
        "results": [point("shards", "w=1", "read", 1e9, workers=1)],
        "verdict": {"checkpoint": None, "data": [], "pass": None, "model": {"name": "7b"}},
        "duration_s": 3.0,
    }
    text = bench_prometheus_text(doc)
    assert 'target="weird \\"path\\"\\\\x"' in text
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("#"):
            name = line.split("{")[0].removesuffix("_sum").removesuffix("_count")
            kind = "summary" if name.endswith("latency_seconds") else "gauge"
            assert f"# TYPE {name} {kind}" in lines[:i]
    assert "storekit_bench_io_latency_seconds{" in text and 'quantile="0.99"' in text
    assert "storekit_bench_io_latency_seconds_count{" in text
    promtool(text)


def test_write_atomic_replaces_whole_files_and_leaves_no_temp(tmp_path: Path) -> None:
    dest = tmp_path / "bench.prom"
    dest.write_text("old")
    write_atomic(str(dest), b"new")
    assert dest.read_text() == "new"
    assert os.listdir(tmp_path) == ["bench.prom"]


def test_schema_validator_finds_missing_and_mistyped_fields() -> None:
    problems = schema.validate({"schema": "storekit.bench.io", "bench_schema_version": "1"})
    assert "bench_schema_version: expected int, got str" in problems
    assert "run_id: missing" in problems
    text = "\n".join(schema.describe())
    for name in schema.DOCUMENT:
        assert f"{name} (" in text


def test_the_table_marks_a_bimodal_phase_and_lists_both_modes() -> None:
    create = summary(None, ops=1_400.0)
    slow = {"median": 1_390.0, "count": 5, "min": 1_350.0, "max": 1_420.0}
    fast = {"median": 34_000.0, "count": 2, "min": 33_000.0, "max": 35_000.0}
    create["ops_per_s"] = {
        "median": 1_400.0,
        "min": 1_350.0,
        "max": 35_000.0,
        "spread": 24.0,
        "modes": [slow, fast],
    }
    create["stonewall_ops_per_s"] = create["ops_per_s"]
    create.update(max_worker_pct_of_core=99.0, stragglers=0)
    doc = {
        "environment": {"target": "/x", "filesystem": {"fs_type": "ext4", "source": "/dev/vda"}},
        "honesty": {},
        "run_id": "r",
        "config_hash": "c",
        "parameters": {"repeat": 7},
        "results": [
            {
                "pattern": "meta",
                "label": "w=1 dirs=unique",
                "phases": [{"phase": "create", "op": "create", "summary": create}],
            }
        ],
        "verdict": {"thresholds": {}, "model": {"name": "7b"}, "data": []},
        "plan": {"notes": []},
        "warnings": [],
    }
    console = Console(width=160, record=True, force_terminal=False)
    render_human(console, doc)
    text = console.export_text()
    assert "2400% (modes)" in text
    assert "modes over repeats (median x repeats): meta w=1 dirs=unique create: " in text
    assert "create: 1390 op/s x5, 34.0k op/s x2" in text


def test_a_multi_node_run_shows_each_node_in_the_table_prometheus_and_plot(
    promtool: Callable[[str], None],
) -> None:
    rows = [
        {"node": n, "workers": 2, "bytes": 1, "ops": 1, "bandwidth_bytes_per_s": bw, "ops_per_s": 5.0,
         "elapsed_s": 1.0, "p99_ms": 2.0}
        for n, bw in (("gpu-a01", 1.5e9), ("gpu-a02", 0.5e9))
    ]  # fmt: skip
    read = point("shards", "w=2", "read", 2e9, workers=2)
    read["phases"][0].update(nodes=rows, repeats=[], cache=[])
    read["phases"][0]["summary"].update(max_worker_pct_of_core=20.0, stragglers=0)
    clock = {"offset_ns": 1_500_000, "uncertainty_ns": 40_000}
    doc = {
        "environment": {"target": "/lustre", "nodes": [{"node": "gpu-a01", "clock": clock},
                                                       {"node": "gpu-a02", "clock": clock}]},
        "honesty": {}, "run_id": "r", "config_hash": "c", "parameters": {"repeat": 1}, "results": [read],
        "verdict": {"thresholds": {}, "model": {"name": "7b"}, "data": [], "checkpoint": None, "pass": None},
        "plan": {"notes": []}, "warnings": [], "duration_s": 1.0,
    }  # fmt: skip
    console = Console(width=160, record=True, force_terminal=False)
    render_human(console, doc)
    text = console.export_text()
    assert "2 nodes, clock offsets corrected: gpu-a01 (+1.50 ms +/- 0.04)" in text
    assert "gpu-a01" in text.split("per node")[1] and "1.50 GB/s" in text and "500.00 MB/s" in text
    prom = bench_prometheus_text(doc)
    promtool(prom)
    assert "storekit_bench_io_node_bandwidth_bytes_per_second{" in prom and 'node="gpu-a02"' in prom
    pytest.importorskip("matplotlib")
    from storekit.bench.plot import node_bars, render_png

    labels, per_node = node_bars(doc)
    assert labels == ["shards read\nw=2"] and per_node == {"gpu-a01": [1.5e9], "gpu-a02": [0.5e9]}
    assert render_png(doc).startswith(b"\x89PNG")
