"""One bytes/s unit for every panel of a bench plot (GB/s beside MB/s reads as a 1000x gap the wrong
way round), and the metadata bars on a log scale when their rates span orders of magnitude (a delete
at ~220 op/s must not vanish beside a stat at ~96k op/s)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.bench.test_plot import phase, point

plot = pytest.importorskip("storekit.bench.plot", reason="matplotlib (storekit[plot]) is not installed")


def drawn(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The axes render_png draws (the figure is kept instead of closed)."""
    figures: list[Any] = []
    monkeypatch.setattr(plot.plt, "close", figures.append)
    plot.render_png(doc)
    (fig,) = figures
    result = [ax for ax in fig.axes if ax.get_visible()]
    return result


def test_every_panel_shows_bytes_in_one_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    results = [
        point("shards", f"w={w}", {"workers": w}, phase("write", "write", 2e9 * w)) for w in (1, 2)
    ] + [point("checkpoint", "ranks=4", {"ranks": 4}, phase("write", "write", 4e7))]
    doc = {"results": results, "environment": {"target": "/x"}, "run_id": "r1"}
    units = {ax.get_ylabel().split()[0] for ax in drawn(doc, monkeypatch) if "/s" in ax.get_ylabel()}
    assert units == {"GB/s"}


def test_meta_bars_use_a_log_scale_across_orders_of_magnitude(monkeypatch: pytest.MonkeyPatch) -> None:
    meta = point(
        "meta", "w=4", {"workers": 4}, phase("stat", "stat", 96_000.0), phase("delete", "delete", 220.0)
    )
    doc = {"results": [meta], "environment": {"target": "/x"}, "run_id": "r1"}
    (ax,) = [ax for ax in drawn(doc, monkeypatch) if ax.get_title().startswith("meta")]
    assert ax.get_yscale() == "log"
