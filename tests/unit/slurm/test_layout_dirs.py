"""What a Slurm submission writes before its sbatch (no Slurm needed): on a tier nobody ran `init`
on, the work dir's scratch/ and the log dir's logs/ get the layout's modes and the scripts go under
logs/, so `storekit layout check` is clean (the real-Slurm run: integration/test_prepare_slurm.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from storekit.config import load_config
from storekit.durable import write_file_atomic
from storekit.pipeline.location import resolve_location
from storekit.pipeline.submit import log_dir_for, make_areas
from storekit.pipeline.workdir import WorkDir
from storekit.slurm.submit import SCRIPT_MODE, make_log_dir
from tests.conftest import Ran


def test_a_submissions_dirs_on_a_tier_without_init_pass_layout_check(
    tmp_path: Path, sk: Callable[..., Ran]
) -> None:
    (tmp_path / "storage").mkdir()
    cfg = tmp_path / "storekit.toml"
    cfg.write_text(f'default_tier = "t"\n[tiers.t]\nurl = "{tmp_path / "storage"}"\nrole = "parallel"\n')
    site = load_config(str(cfg))
    location = resolve_location("datasets/text/web/v1", site, None)
    work = tmp_path / "storage/scratch/storekit-prepare-web-v1-0123456789ab"
    log_dir = log_dir_for(work, location)
    assert log_dir == tmp_path / "storage/logs" / work.name
    old = os.umask(0o022)
    try:
        make_areas(location, work, log_dir)  # what submit_prepare does first
        make_log_dir(log_dir)
        write_file_atomic(log_dir / "array.sbatch", b"#!/bin/bash\n", mode=SCRIPT_MODE)
        WorkDir(work).create()
    finally:
        os.umask(old)
    assert oct(os.stat(tmp_path / "storage/scratch").st_mode & 0o7777) == "0o1777"
    assert oct(os.stat(tmp_path / "storage/logs").st_mode & 0o7777) == "0o2775"
    assert sk(tmp_path, "init", "-q", "--config", str(cfg)).code == 0
    check = sk(tmp_path, "layout", "check", "--json", "--config", str(cfg))
    assert check.code == 0 and check.json()["clean"] is True, check.stdout
