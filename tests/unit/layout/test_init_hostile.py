"""Issue #33 item 3: `init` without --adopt never lays out another user's directory, even one that
happens to hold an area-named subdirectory; in a dry run it refuses the same way."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.conftest import run_cli
from tests.hostile import NEIGHBOUR_UID, as_neighbour, shared_dir

__all__ = ["shared_dir"]  # the fixture, imported for pytest


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def test_init_refuses_another_users_private_dir_that_has_a_logs_subdir(shared_dir: Path, capsys: Any) -> None:
    theirs = shared_dir / "shared" / "rtuser"

    def make() -> None:
        theirs.mkdir(mode=0o700)
        (theirs / "notes.txt").write_bytes(b"mine\n")
        (theirs / "private").mkdir(mode=0o700)
        (theirs / "logs").mkdir(mode=0o700)  # one area name: not a storekit tier for all that

    as_neighbour(make)
    (shared_dir / "storekit.toml").write_text(f'[tiers.t]\nurl = "{theirs}"\n')
    for args in (["--dry-run", "--json"], ["--json"]):
        res = run_cli(["init", *args], capsys)
        assert res.code == 1, res.stdout
        message = res.json()["error"]["message"]
        assert f"is owned by uid {NEIGHBOUR_UID}, not by you (uid 0)" in message
        assert _mode(theirs) == 0o700 and _mode(theirs / "logs") == 0o700
        assert sorted(os.listdir(theirs)) == ["logs", "notes.txt", "private"]
    adopted = run_cli(["init", "--adopt", "--quiet"], capsys)  # said on purpose: laid out
    assert adopted.code == 0, adopted.stderr
    assert (theirs / "scratch").is_dir() and (theirs / "notes.txt").read_bytes() == b"mine\n"
