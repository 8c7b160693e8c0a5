"""Fixtures for checkpoint tests: the bundled layout's writer profiles and a run on a local tier."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from storekit.checkpoint.scan import RunScan, scan_run
from storekit.layout.init import apply_init, plan_init
from storekit.layout.spec import AreaSpec, LayoutSpec, load_layout
from storekit.store import Store

DAY = 86400.0


@pytest.fixture
def spec() -> LayoutSpec:
    return load_layout("llm-cluster")


@pytest.fixture
def area(spec: LayoutSpec) -> AreaSpec:
    found = spec.area("checkpoints")
    assert found is not None
    return found


@pytest.fixture
def run_dir(local_store: Store, spec: LayoutSpec) -> Path:
    apply_init(plan_init(spec, local_store), local_store)
    run = Path(local_store.root) / "checkpoints/run_001"
    run.mkdir()
    return run


def scan(store: Store, area: AreaSpec, now: float | None = None) -> RunScan:
    return scan_run(
        store,
        "checkpoints/run_001",
        area.writers,
        beside=area.beside,
        quiet_seconds=area.quiet_seconds,
        now=time.time() + DAY if now is None else now,
    )


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def age(path: Path, seconds: float) -> None:
    """Set the mtime of `path` and everything below it `seconds` into the past."""
    when = time.time() - seconds
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            os.utime(os.path.join(dirpath, name), (when, when))
        os.utime(dirpath, (when, when))
