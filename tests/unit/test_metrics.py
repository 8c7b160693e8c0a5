"""The one Prometheus textfile writer: families, escaping, summaries, atomic 0644 files, promtool."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from storekit.errors import UsageError
from storekit.metrics import Metrics, write_textfile


def test_families_are_declared_once_with_escaped_labels_and_help(promtool: Callable[[str], None]) -> None:
    m = Metrics()
    m.gauge("storekit_x_bytes", 'Bytes "seen"\nby x \\ y.', {"path": 'a "b"\\c\nd'}, 3)
    m.gauge("storekit_x_bytes", 'Bytes "seen"\nby x \\ y.', {"path": "other"}, 2.5)
    m.gauge("storekit_x_bytes", 'Bytes "seen"\nby x \\ y.', {"path": "skipped"}, None)
    m.gauge("storekit_y", "Not a number.", {}, math.nan)
    text = m.render()
    assert text.splitlines() == [
        '# HELP storekit_x_bytes Bytes "seen"\\nby x \\\\ y.',
        "# TYPE storekit_x_bytes gauge",
        'storekit_x_bytes{path="a \\"b\\"\\\\c\\nd"} 3',
        'storekit_x_bytes{path="other"} 2.5',
        "# HELP storekit_y Not a number.",
        "# TYPE storekit_y gauge",
        "storekit_y NaN",
    ]
    promtool(text)


def test_quantiles_only_on_summaries_with_sum_and_count(promtool: Callable[[str], None]) -> None:
    m = Metrics()
    labels = {"phase": "read"}
    m.summary("storekit_lat_seconds", "Latency.", labels, quantiles={0.99: 0.2, 0.5: 0.1, 0.9: None},
              count=4, total=0.5)  # fmt: skip
    assert m.render().splitlines()[1:] == [
        "# TYPE storekit_lat_seconds summary",
        'storekit_lat_seconds{phase="read",quantile="0.5"} 0.1',
        'storekit_lat_seconds{phase="read",quantile="0.99"} 0.2',
        'storekit_lat_seconds_sum{phase="read"} 0.5',
        'storekit_lat_seconds_count{phase="read"} 4',
    ]
    promtool(m.render())
    with pytest.raises(ValueError, match="quantile"):
        m.gauge("storekit_g", "A gauge.", {"quantile": "0.5"}, 1)
    with pytest.raises(ValueError, match="different TYPE"):
        m.gauge("storekit_lat_seconds", "Latency.", labels, 1)
    with pytest.raises(ValueError, match="duplicate"):
        m.summary("storekit_lat_seconds", "Latency.", labels, quantiles={}, count=1, total=1)
    with pytest.raises(ValueError, match="metric name"):
        m.gauge("storekit-bad", "x", {}, 1)


def test_textfile_is_replaced_atomically_with_mode_0644_whatever_the_umask(tmp_path: Path) -> None:
    dest = tmp_path / "storekit.prom"
    dest.write_text("old")
    old = os.umask(0o077)
    try:
        write_textfile(str(dest), "storekit_up 1\n")
    finally:
        os.umask(old)
    assert dest.read_text() == "storekit_up 1\n"
    assert dest.stat().st_mode & 0o777 == 0o644
    assert os.listdir(tmp_path) == ["storekit.prom"]
    with pytest.raises(UsageError, match="does not exist"):
        write_textfile(str(tmp_path / "missing" / "x.prom"), "")
