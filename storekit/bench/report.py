"""Results out: the JSON document, a Prometheus textfile, a PNG plot (the human table is drawn in cli/).

The JSON layout is described field by field in `storekit/bench/schema.py` (BENCH_SCHEMA_VERSION).
"""

from __future__ import annotations

import os
from typing import Any

from storekit.bench.plan import BenchPlan
from storekit.bench.schema import BENCH_SCHEMA, BENCH_SCHEMA_VERSION
from storekit.durable import write_file_atomic
from storekit.errors import StorekitError, UsageError
from storekit.metrics import TEXTFILE_MODE, Metrics, write_textfile


def build_document(plan: BenchPlan, run: dict[str, Any], verdict: dict[str, Any]) -> dict[str, Any]:
    spec = plan.spec
    return {
        "schema": BENCH_SCHEMA,
        "bench_schema_version": BENCH_SCHEMA_VERSION,
        "run_id": run["run_id"],
        "started_at": run["started_at"],
        "finished_at": run["finished_at"],
        "duration_s": run["duration_s"],
        "config_hash": spec.config_hash(),
        "parameters": spec.parameters(),
        "environment": run["environment"],
        "honesty": run["honesty"],
        "plan": {
            "run_dir": plan.run_rel,
            "peak_bytes": plan.peak_bytes,
            "space_needed_bytes": plan.space_needed,
            "notes": list(plan.notes),
        },
        "setup": run["setup"],
        "results": run["points"],
        "verdict": verdict,
        "cleanup": run["cleanup"],
        "warnings": run["warnings"],
    }


# -- Prometheus textfile ---------------------------------------------------------------------------


_QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p99_9": 0.999}
DATA_OPS = ("write", "read", "randread")  # phases that move data (the others are metadata operations)


def bench_prometheus_text(doc: dict[str, Any]) -> str:
    """A bench io document as storekit_bench_io_* metrics (rendered by storekit.metrics, as
    `storekit status --prometheus` is: layout.status.status_prometheus_text)."""
    m = Metrics()
    prefix = "storekit_bench_io_"

    def gauge(name: str, help_text: str, labels: dict[str, Any], value: float | None) -> None:
        m.gauge(prefix + name, help_text, labels, value)

    base = {"target": doc["environment"]["target"], "config_hash": doc["config_hash"]}
    # one label set per family: every point carries every parameter label ("" where it has none),
    # as Prometheus wants within a metric (shards rows have block_size, meta rows dirs, ...)
    params = sorted({key for point in doc["results"] for key in point["params"]})
    for point in doc["results"]:
        for ph in point["phases"]:
            s = ph["summary"]
            point_params = {key: point["params"].get(key, "") for key in params}
            labels = {**base, "pattern": point["pattern"], "phase": ph["phase"], **point_params}
            if ph["op"] in DATA_OPS:  # a stat, create or delete moves no data: no bandwidth, not 0
                gauge(
                    "bandwidth_bytes_per_second",
                    "Median bandwidth over repeats: bytes/(last finish - first start).",
                    labels,
                    s["bandwidth_bytes_per_s"]["median"],
                )
                gauge(
                    "bandwidth_spread_ratio",
                    "(max - min) / median bandwidth over repeats.",
                    labels,
                    s["bandwidth_bytes_per_s"]["spread"],
                )
                gauge(
                    "stonewall_bandwidth_bytes_per_second",
                    "Median bandwidth while all workers were active.",
                    labels,
                    s["stonewall_bandwidth_bytes_per_s"]["median"],
                )
            gauge(
                "ops_per_second",
                "Median operations per second over repeats.",
                labels,
                s["ops_per_s"]["median"],
            )
            lat = s["latency"]
            if lat.get("count"):
                m.summary(
                    prefix + "latency_seconds",
                    "Operation latency from histograms merged over workers and repeats.",
                    labels,
                    quantiles={
                        q: None if lat[f"{key}_ms"] is None else lat[f"{key}_ms"] / 1e3
                        for key, q in _QUANTILES.items()
                    },
                    count=int(lat["count"]),
                    total=(lat.get("mean_ms") or 0.0) * lat["count"] / 1e3,
                )
            for row in ph.get("nodes", []):
                gauge(
                    "node_bandwidth_bytes_per_second",
                    "One node's bandwidth (median over repeats) in a multi-node run.",
                    {**labels, "node": row["node"]},
                    row["bandwidth_bytes_per_s"],
                )
                gauge(
                    "node_ops_per_second",
                    "One node's operations per second (median over repeats) in a multi-node run.",
                    {**labels, "node": row["node"]},
                    row["ops_per_s"],
                )
            gauge(
                "cpu_cores_used",
                "CPU cores the benchmark's own workers used (median over repeats).",
                labels,
                s["cpu_cores_used"]["median"],
            )
    verdict = doc["verdict"]
    ckpt = verdict.get("checkpoint")
    if ckpt:
        model = {**base, "model": verdict["model"]["name"], "ranks": ckpt["ranks"]}
        gauge(
            "checkpoint_save_seconds", "Estimated checkpoint save time for the model.", model, ckpt["save_s"]
        )
        gauge(
            "checkpoint_load_seconds", "Estimated checkpoint load time for the model.", model, ckpt["load_s"]
        )
    for d in verdict["data"]:
        gauge(
            "gpus_fed",
            "GPUs the measured dataset bandwidth can feed.",
            {**base, "source": d["pattern"]},
            d["gpus_fed"],
        )
    if verdict.get("pass") is not None:
        gauge("verdict_pass", "1 when every threshold was met.", base, 1 if verdict["pass"] else 0)
    gauge("duration_seconds", "Wall time of the whole benchmark run.", base, doc["duration_s"])
    finished = _epoch(doc.get("finished_at"))
    gauge("last_run_timestamp_seconds", "When this benchmark run finished (Unix time).", base, finished)
    return m.render()


def _epoch(stamp: Any) -> float | None:
    """An ISO 8601 time (or Unix seconds) as Unix seconds; None when there is none."""
    if isinstance(stamp, int | float):
        return float(stamp)
    if not isinstance(stamp, str):
        return None
    from datetime import datetime

    try:
        return round(datetime.fromisoformat(stamp).timestamp(), 3)
    except ValueError:
        return None


def write_atomic(path: str, data: bytes) -> None:
    """Write next to the destination and rename, so a reader never sees half a file (mode 0644)."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"{path}: directory {directory} does not exist")
    write_file_atomic(path, data, mode=TEXTFILE_MODE)


def write_prometheus(path: str, doc: dict[str, Any]) -> None:
    write_textfile(path, bench_prometheus_text(doc))


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise StorekitError(
            "--plot needs matplotlib, which is not installed", hint="pip install 'storekit[plot]'"
        ) from None


def write_plot(path: str, doc: dict[str, Any]) -> None:
    require_matplotlib()
    from storekit.bench.plot import render_png

    write_atomic(path, render_png(doc))
