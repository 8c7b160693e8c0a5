"""PNG plot of a bench document: throughput vs workers, vs block size / queue depth, and time series.

matplotlib is optional (`pip install 'storekit[plot]'`); only this module imports it.
"""

from __future__ import annotations

import io
from collections import defaultdict
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

GB = 1e9


def _median(phase: dict[str, Any], key: str = "bandwidth_bytes_per_s") -> tuple[float, float, float]:
    s = phase["summary"][key]
    med = s["median"] or 0.0
    return med, med - (s["min"] or med), (s["max"] or med) - med


def _lines(
    doc: dict[str, Any], x_key: str, group_keys: tuple[str, ...], patterns: tuple[str, ...]
) -> dict[str, list[tuple[float, float, float, float]]]:
    lines: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    for point in doc["results"]:
        if point["pattern"] not in patterns or x_key not in point["params"]:
            continue
        for ph in point["phases"]:
            if not ph["summary"]["bandwidth_bytes_per_s"]["median"]:
                continue
            group = " ".join(f"{k}={point['params'][k]}" for k in group_keys if k in point["params"])
            name = f"{point['pattern']} {ph['phase']} {group}".strip()
            med, low, high = _median(ph)
            lines[name].append((float(point["params"][x_key]), med / GB, low / GB, high / GB))
    return lines


def _draw(
    ax: Any, lines: dict[str, list[tuple[float, float, float, float]]], xlabel: str, log_x: bool
) -> None:
    if not lines:
        ax.text(0.5, 0.5, "no sweep over this parameter", ha="center", va="center", transform=ax.transAxes)
    for name, pts in sorted(lines.items()):
        pts.sort()
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        ax.errorbar(
            xs, ys, yerr=[[p[2] for p in pts], [p[3] for p in pts]], marker="o", capsize=3, label=name
        )
    if log_x and lines:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("GB/s (median, min-max)")
    ax.grid(True, alpha=0.3)
    if lines:
        ax.legend(fontsize=7)


def render_png(doc: dict[str, Any]) -> bytes:
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    _draw(axes[0][0], _lines(doc, "workers", ("block_size",), ("shards", "tokens")), "workers", True)
    axes[0][0].set_title("throughput vs workers")
    _draw(
        axes[0][1],
        _lines(doc, "block_size", ("workers", "ranks"), ("shards", "checkpoint")),
        "block size (bytes)",
        True,
    )
    axes[0][1].set_title("throughput vs block size")
    _draw(axes[1][0], _lines(doc, "queue_depth", ("workers",), ("tokens",)), "queue depth", True)
    axes[1][0].set_title("training-window reads vs queue depth")
    ax = axes[1][1]
    for point in doc["results"]:
        for ph in point["phases"]:
            series = ph["repeats"][0]["series"] if ph["repeats"] else []
            if len(series) >= 1 and ph["summary"]["bandwidth_bytes_per_s"]["median"]:
                ax.plot(
                    [r["t_s"] for r in series],
                    [r["bytes_per_s"] / GB for r in series],
                    marker=".",
                    label=f"{point['pattern']} {ph['phase']} {point['label']}",
                )
    ax.set_title("time series, first repeat (1 s buckets)")
    ax.set_xlabel("seconds since first start")
    ax.set_ylabel("GB/s")
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=6)
    fig.suptitle(f"storekit bench io  {doc['environment']['target']}  run {doc['run_id']}")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()
