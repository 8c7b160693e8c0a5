"""A site of three local tiers (burst, parallel, archive) with runs shaped as their writers leave them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from storekit.config import SiteConfig, load_config
from storekit.layout.init import apply_init, plan_init
from storekit.layout.spec import load_layout
from storekit.store import open_store
from tests.unit.tier.helpers import make_unit

DAY = 86400.0
CONFIG = """\
default_tier = "lustre"
[tiers.nvme]
url = "./nvme"
role = "burst"
[tiers.lustre]
url = "./lustre"
role = "parallel"
[tiers.vault]
url = "./vault"
role = "archive"
"""


def make_site(root: Path, policies: str = "") -> SiteConfig:
    (root / "storekit.toml").write_text(CONFIG + policies)
    site = load_config(str(root / "storekit.toml"))
    spec = load_layout("llm-cluster")
    for tier in site.tiers.values():
        store = open_store(tier)
        apply_init(plan_init(spec, store), store)
    return site


def aged(path: Path, seconds: float) -> None:
    """Every mtime at and below `path` set `seconds` into the past (links not followed)."""
    when = time.time() - seconds
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames + dirnames:
            os.utime(os.path.join(dirpath, name), (when, when), follow_symlinks=False)
    os.utime(path, (when, when))


def dcp_unit(run: Path, name: str, *, complete: bool = True, age: float = 5 * DAY, size: int = 100) -> Path:
    """A torch.distributed.checkpoint directory: rank files, `.metadata` last (absent: unfinished)."""
    unit = run / name
    unit.mkdir(parents=True)
    for rank in range(2):
        (unit / f"__{rank}_0.distcp").write_bytes(bytes([rank]) * size)
    if complete:
        (unit / ".metadata").write_bytes(b"meta")
    aged(unit, age)
    return unit


def tree_state(root: Path) -> dict[str, tuple[bytes | None, int, int, int]]:
    """Every path below root with its bytes, mode, mtime_ns and inode: equal means byte-identical."""
    out: dict[str, tuple[bytes | None, int, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            data = p.read_bytes() if p.is_file() and not p.is_symlink() else None
            out[str(p.relative_to(root))] = (data, st.st_mode, st.st_mtime_ns, st.st_ino)
    return out


UNIT = "checkpoints/run_001/step_100"


@pytest.fixture
def tiers(tmp_path: Path) -> tuple[Path, Path, Path]:
    """burst (one unit at UNIT), an empty parallel tier, and where the journal goes."""
    burst, parallel, journal = tmp_path / "burst", tmp_path / "parallel", tmp_path / "journal"
    make_unit(burst / UNIT, seed=1)
    parallel.mkdir()
    return burst, parallel, journal
