"""bench io's Prometheus file: one label set per family (shards and meta rows alike), no bandwidth
for phases that move no data (a meta stat is not 0 B/s), and a last-run timestamp to alert on."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Ran


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = re.fullmatch(r"([a-z_:]+)(?:\{(.*)\})? (\S+)", line)
        assert match, line
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        out.append((match.group(1), labels, float(match.group(3))))
    return out


def test_families_have_one_label_set_and_meta_has_no_bandwidth(
    tmp_path: Path, sk: Callable[..., Ran], promtool: Callable[[str], None]
) -> None:
    target = tmp_path / "t"
    target.mkdir()
    prom = tmp_path / "bench.prom"
    before = time.time()
    ran = sk(
        tmp_path, "bench", "io", "--target", str(target), "--pattern", "shards,meta", "--size", "4M",
        "--file-size", "1M", "--workers", "1", "--block-size", "1M", "--files", "20", "--no-direct",
        "--prometheus", str(prom), "-q",
    )  # fmt: skip
    assert ran.code == 0, ran.stderr
    text = prom.read_text()
    promtool(text)
    families: dict[str, set[frozenset[str]]] = {}
    for name, labels, _ in samples(text):
        families.setdefault(name, set()).add(frozenset(set(labels) - {"quantile"}))
    mixed = {name: sets for name, sets in families.items() if len(sets) > 1}
    assert mixed == {}
    bandwidth = [
        lab["phase"] for n, lab, _ in samples(text) if n == "storekit_bench_io_bandwidth_bytes_per_second"
    ]
    assert sorted(set(bandwidth)) == ["read", "write"]  # meta's create/stat/read/delete: none
    ops = {
        (lab["pattern"], lab["phase"])
        for n, lab, _ in samples(text)
        if n == "storekit_bench_io_ops_per_second"
    }
    assert ("meta", "stat") in ops
    (stamp,) = [v for n, _, v in samples(text) if n == "storekit_bench_io_last_run_timestamp_seconds"]
    assert before <= stamp <= time.time() + 1
