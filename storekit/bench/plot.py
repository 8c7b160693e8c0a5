"""PNG plot of a bench document: only panels whose axis varies, one series per combination of the
other parameters that differ, human units, op/s apart from bytes/s, and time series per pattern.

matplotlib is optional (`pip install 'storekit[plot]'`); only this module imports it.
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, NullLocator

from storekit.units import format_bytes, rate_unit

DATA_OPS = ("write", "read", "randread")  # phases that move bytes; the rest are counted in op/s
SWEEP_AXES = {  # parameter -> axis label (the ones a sweep varies)
    "workers": "workers",
    "ranks": "ranks",
    "block_size": "block size",
    "queue_depth": "queue depth (requests in flight per worker)",
    "files_per_worker": "files per worker",
}
SIZE_PARAMS = ("block_size", "window", "file_size", "small_file_size")
SHORT = {"block_size": "bs", "queue_depth": "qd", "workers": "w", "files_per_worker": "files"}


def human_param(key: str, value: Any) -> str:
    sized = key in SIZE_PARAMS and isinstance(value, int | float)
    text = format_bytes(float(value), compact=True) if sized else str(value)
    return f"{SHORT.get(key, key)}={text}"


def figure_unit(doc: dict[str, Any]) -> tuple[str, float]:
    """The one bytes/s unit of a whole figure: the one its largest data rate is shown in."""
    values: list[float] = []
    for point in doc["results"]:
        for ph in point["phases"]:
            if not _is_data(ph):
                continue
            values += [v for v in (ph["summary"]["bandwidth_bytes_per_s"]["max"],) if v]
            values += [r["bytes_per_s"] for rep in ph["repeats"][:1] for r in rep.get("series") or []]
            values += [r["bandwidth_bytes_per_s"] for r in ph.get("nodes", [])]
    return _rate_unit(values)


def _rate_unit(values: list[float]) -> tuple[str, float]:
    """One unit for a whole axis: the one its largest value is shown in."""
    return rate_unit(max(values, default=0.0))


@dataclass
class Series:
    label: str
    order: tuple[Any, ...]  # phase, then the other parameters' values: 256 KiB before 1 MiB
    points: list[tuple[float, float, float, float]] = field(default_factory=list)  # x, median, min, max


def _is_data(phase: dict[str, Any]) -> bool:
    return phase["op"] in DATA_OPS


def _sortable(value: Any) -> tuple[int, float, str]:
    return (0, float(value), "") if isinstance(value, int | float) else (1, 0.0, str(value))


def _differing(points: list[dict[str, Any]], exclude: str) -> list[str]:
    keys = sorted({k for p in points for k in p["params"]} - {exclude})
    return [k for k in keys if len({str(p["params"].get(k)) for p in points}) > 1]


def sweep_panels(doc: dict[str, Any]) -> list[tuple[str, str, bool, list[Series]]]:
    """(title, x parameter, data?, series) for every parameter that takes 2+ values in a pattern."""
    panels = []
    by_pattern: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for point in doc["results"]:
        by_pattern[point["pattern"]].append(point)
    for pattern, points in by_pattern.items():
        if pattern == "meta":
            continue  # its rates are drawn as bars over all its points (_draw_meta_bars)
        for axis in SWEEP_AXES:
            having = [p for p in points if axis in p["params"]]
            if len({p["params"][axis] for p in having}) < 2:
                continue  # an axis with one value is not a sweep: no panel
            others = _differing(having, axis)
            for data in (True, False):
                lines: dict[str, Series] = {}
                for point in having:
                    for ph in point["phases"]:
                        if _is_data(ph) != data:
                            continue
                        key = "bandwidth_bytes_per_s" if data else "ops_per_s"
                        s = ph["summary"][key]
                        if not s["median"]:
                            continue
                        label = " ".join([ph["phase"], *(human_param(k, point["params"][k]) for k in others)])
                        order = (ph["phase"], *(_sortable(point["params"][k]) for k in others))
                        line = lines.setdefault(label, Series(label, order))
                        med = s["median"]
                        low, high = s["min"] or med, s["max"] or med
                        line.points.append((float(point["params"][axis]), med, low, high))
                if lines:
                    what = "throughput" if data else "operations"
                    title = f"{pattern}: {what} vs {SWEEP_AXES[axis].split(' (')[0]}"
                    panels.append((title, axis, data, sorted(lines.values(), key=lambda x: x.order)))
    return panels


def _draw_sweep(
    ax: Any,
    title: str,
    axis: str,
    data: bool,
    lines: list[Series],
    unit_scale: tuple[str, float] | None = None,
) -> None:
    values = [p[3] for line in lines for p in line.points]
    unit, scale = (unit_scale or _rate_unit(values)) if data else ("op/s", 1.0)
    xs_all: set[float] = set()
    for line in lines:
        pts = sorted(line.points)
        xs = [p[0] for p in pts]
        xs_all.update(xs)
        ys = [p[1] / scale for p in pts]
        err = [[(p[1] - p[2]) / scale for p in pts], [(p[3] - p[1]) / scale for p in pts]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=line.label)
    ax.set_xscale("log", base=2)
    ticks = sorted(xs_all)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    labels = [format_bytes(t, compact=True) if axis in SIZE_PARAMS else f"{t:g}" for t in ticks]
    ax.set_xticklabels(labels)
    ax.set_xlabel(SWEEP_AXES[axis])
    ax.set_ylabel(f"{unit} (median, min-max)" if data else "op/s (median, min-max)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")


def _draw_meta_bars(ax: Any, doc: dict[str, Any]) -> bool:
    """Metadata rates as grouped bars (op/s on their own axis): phases x the points' parameters."""
    points = [p for p in doc["results"] if p["pattern"] == "meta"]
    if not points:
        return False
    others = _differing(points, "")
    phases = [ph["phase"] for ph in points[0]["phases"]]
    width = 0.8 / len(points)
    for i, point in enumerate(points):
        rates = {ph["phase"]: ph["summary"]["ops_per_s"]["median"] or 0.0 for ph in point["phases"]}
        label = " ".join(human_param(k, point["params"][k]) for k in others) or point["label"]
        ax.bar(
            [j + i * width for j in range(len(phases))],
            [rates.get(ph, 0.0) for ph in phases],
            width,
            label=label,
        )
    ax.set_xticks([j + width * (len(points) - 1) / 2 for j in range(len(phases))])
    ax.set_xticklabels(phases)
    ax.set_ylabel("op/s (median)")
    shown = [r for p in points for ph in p["phases"] if (r := ph["summary"]["ops_per_s"]["median"])]
    if shown and max(shown) >= 100 * min(shown):
        ax.set_yscale("log")  # a delete at ~200 op/s beside a stat at ~100k op/s stays visible
    ax.set_title("meta: small-file operations")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    return True


def _draw_series(
    ax: Any, pattern: str, doc: dict[str, Any], unit_scale: tuple[str, float] | None = None
) -> bool:
    """One line per point and phase over the phase's own duration (its own bucket size)."""
    drawn, values, buckets = [], [], set()
    for point in doc["results"]:
        if point["pattern"] != pattern:
            continue
        for ph in point["phases"]:
            if not _is_data(ph) or not ph["repeats"]:
                continue
            rep = ph["repeats"][0]
            rows = rep.get("series") or []
            if not rows:
                continue
            buckets.add(rep.get("series_bucket_s", 1.0))
            drawn.append((f"{ph['phase']} {point['label']}", rows))
            values += [r["bytes_per_s"] for r in rows]
    if not drawn:
        return False
    unit, scale = unit_scale or _rate_unit(values)
    for label, rows in drawn:
        xs = [r["t_s"] for r in rows]
        ys = [r["bytes_per_s"] / scale for r in rows]
        ax.plot(xs, ys, marker="." if len(rows) <= 30 else None, drawstyle="steps-post", label=label)
    step = ", ".join(_seconds(b) for b in sorted(buckets))
    ax.set_title(f"{pattern}: throughput over time (first repeat, {step} buckets)")
    ax.set_xlabel("seconds since the phase's first start")
    ax.set_ylabel(unit)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6, ncol=2 if len(drawn) > 6 else 1)
    return True


def node_bars(doc: dict[str, Any]) -> tuple[list[str], dict[str, list[float]]]:
    """Multi-node runs: (data phase labels, node -> its bandwidth in each), for one bar per node."""
    labels: list[str] = []
    per_node: dict[str, list[float]] = defaultdict(list)
    for point in doc["results"]:
        for ph in point["phases"]:
            rows = {r["node"]: r["bandwidth_bytes_per_s"] for r in ph.get("nodes", [])}
            if not rows or not _is_data(ph):
                continue
            labels.append(f"{point['pattern']} {ph['phase']}\n{point['label']}")
            for node in sorted(set(per_node) | set(rows)):
                per_node[node] += [0.0] * (len(labels) - 1 - len(per_node[node])) + [rows.get(node, 0.0)]
    return labels, dict(per_node)


def _draw_nodes(ax: Any, doc: dict[str, Any], unit_scale: tuple[str, float] | None = None) -> bool:
    labels, per_node = node_bars(doc)
    if not labels:
        return False
    unit, scale = unit_scale or _rate_unit([v for values in per_node.values() for v in values])
    width = 0.8 / len(per_node)
    for i, (node, values) in enumerate(sorted(per_node.items())):
        ax.bar([j + i * width for j in range(len(values))], [v / scale for v in values], width, label=node)
    ax.set_xticks([j + width * (len(per_node) - 1) / 2 for j in range(len(labels))])
    ax.set_xticklabels(labels, fontsize=6)
    ax.set_ylabel(f"{unit} (median)")
    ax.set_title("per node: each node's own throughput")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    return True


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:g} s"


def render_png(doc: dict[str, Any]) -> bytes:
    sweeps = sweep_panels(doc)
    patterns = sorted({p["pattern"] for p in doc["results"]} - {"meta"})
    has_meta = any(p["pattern"] == "meta" for p in doc["results"])
    has_nodes = bool(node_bars(doc)[0])
    count = len(sweeps) + len(patterns) + int(has_meta) + int(has_nodes)
    cols = 2 if count > 1 else 1
    rows = max(1, math.ceil(count / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 4.3 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    used = 0
    unit = figure_unit(doc)  # every panel of bytes/s in one unit: GB/s beside MB/s misleads
    for title, axis, data, lines in sweeps:
        _draw_sweep(flat[used], title, axis, data, lines, unit)
        used += 1
    if has_meta and _draw_meta_bars(flat[used], doc):
        used += 1
    for pattern in patterns:
        if _draw_series(flat[used], pattern, doc, unit):
            used += 1
    if has_nodes and _draw_nodes(flat[used], doc, unit):
        used += 1
    for ax in flat[used:]:
        ax.set_visible(False)
    fig.suptitle(f"storekit bench io  {doc['environment']['target']}  run {doc['run_id']}")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (4.3 * rows)))  # room for the title
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return buf.getvalue()
