"""The human report of `bench io`: the results table, verdict, notes and warnings (the domain in
storekit.bench returns the document; drawing it is the CLI's)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from storekit.bench.verdict import verdict_lines
from storekit.units import rate_unit


def rate(value: float | None) -> str:
    if value is None:
        return "-"
    unit, scale = rate_unit(value)
    return f"{value / scale:.2f} {unit}" if scale > 1 else f"{value:.0f} {unit}"


def count(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1e3:.1f}k" if value >= 10_000 else f"{value:.0f}"


def ms(value: float | None) -> str:
    return "-" if value is None else (f"{value:.3f}" if value < 1 else f"{value:.1f}")


def render_human(console: Console, doc: dict[str, Any]) -> None:
    env = doc["environment"]
    fs = env.get("filesystem") or {}
    where = (
        f"{fs.get('fs_type')} on {fs.get('source')} ({fs.get('mount_options')})"
        if fs
        else env.get("endpoint_url")
    )
    direct = doc["honesty"].get("direct", {})
    drop = doc["honesty"].get("drop_caches", {})
    console.print(f"[bold]storekit bench io[/bold]  {env['target']}  {where}")
    console.print(
        f"run {doc['run_id']}  config {doc['config_hash']}  {_repeats(doc['parameters']['repeat'])} "
        f"(median, spread = (max-min)/median)  direct: {str(direct.get('effective', False)).lower()}"
        + (f" ({direct['reason']})" if direct.get("reason") else "")
        + (f"  caches dropped: {str(drop.get('done')).lower()}" if drop else "")
    )
    if not console.is_terminal:
        console.width = max(console.width, 132)  # files and pipes: no need to squeeze the table
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for name, justify in (
        ("pattern", "left"),
        ("point", "left"),
        ("phase", "left"),
        ("rate", "right"),
        ("spread", "right"),
        ("all-active", "right"),
        ("ops/s", "right"),
        ("p50 ms", "right"),
        ("p99 ms", "right"),
        ("cpu %core", "right"),
        ("stragglers", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    bimodal: list[str] = []
    for point in doc["results"]:
        for ph in point["phases"]:
            s = ph["summary"]
            data = ph["op"] in ("write", "read", "randread")
            main = s["bandwidth_bytes_per_s"] if data else s["ops_per_s"]
            wall = s["stonewall_bandwidth_bytes_per_s"] if data else s["stonewall_ops_per_s"]
            fmt = rate if data else (lambda v: "-" if v is None else f"{count(v)} op/s")
            # one repeat has no spread to speak of: "-", not a reassuring 0%
            one = doc.get("parameters", {}).get("repeat", 2) <= 1
            spread = "-" if main["spread"] is None or one else f"{main['spread']:.0%}"
            if main.get("modes"):
                spread += " (modes)"
                groups = ", ".join(f"{fmt(m['median'])} x{m['count']}" for m in main["modes"])
                bimodal.append(f"{point['pattern']} {point['label']} {ph['phase']}: {groups}")
            table.add_row(
                point["pattern"],
                point["label"],
                ph["phase"],
                fmt(main["median"]),
                spread,
                fmt(wall["median"]),
                count(s["ops_per_s"]["median"]),
                ms(s["latency"]["p50_ms"]),
                ms(s["latency"]["p99_ms"]),
                f"{s['max_worker_pct_of_core']:.0f}",
                str(s["stragglers"]),
            )
    console.print(table)
    _render_nodes(console, doc)
    for line in bimodal:  # a median between two modes describes neither
        console.print(f"modes over repeats (median x repeats): {line}", markup=False)
    lines = verdict_lines(doc["verdict"])
    if lines:
        console.print("[bold]verdict[/bold]")
        for line in lines:
            console.print(f"  {line}", markup=False)
    for note in doc["plan"]["notes"]:
        console.print(f"note: {note}", markup=False)
    for warning in doc["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True)


def _offset(clock: dict[str, Any]) -> str:
    offset, error = clock.get("offset_ns", 0) / 1e6, clock.get("uncertainty_ns", 0) / 1e6
    return f"{offset:+.2f} ms +/- {error:.2f}"


def _render_nodes(console: Console, doc: dict[str, Any]) -> None:
    """On several nodes: who ran where (clock offsets), and each node's own rate per phase."""
    nodes = doc["environment"].get("nodes") or []
    if not nodes:
        return
    clocks = ", ".join(f"{n['node']} ({_offset(n['clock'])})" for n in nodes)
    console.print(f"{len(nodes)} nodes, clock offsets corrected: {clocks}", markup=False, soft_wrap=True)
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for name, justify in (
        ("pattern", "left"),
        ("point", "left"),
        ("phase", "left"),
        ("node", "left"),
        ("workers", "right"),
        ("rate", "right"),
        ("ops/s", "right"),
        ("p99 ms", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for point in doc["results"]:
        for ph in point["phases"]:
            data = ph["op"] in ("write", "read", "randread")
            for row in ph.get("nodes", []):
                main = rate(row["bandwidth_bytes_per_s"]) if data else f"{count(row['ops_per_s'])} op/s"
                table.add_row(point["pattern"], point["label"], ph["phase"], row["node"], str(row["workers"]),
                              main, count(row["ops_per_s"]), ms(row["p99_ms"]))  # fmt: skip
    console.print("per node (median over repeats):")
    console.print(table)


def _repeats(n: int) -> str:
    return f"{n} repeat{'' if n == 1 else 's'}"
