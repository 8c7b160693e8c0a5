"""What git/kubectl/rclone users expect: `storekit version` (and `--version --json`), -v/--verbose,
--no-color, $STOREKIT_TIER, a bad $STOREKIT_PROGRESS_INTERVAL refused, every STOREKIT_* variable the
code reads documented in the README, and the documented job commands shown in help."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from storekit import __version__
from tests.conftest import REPO, Ran
from tests.unit.tier.conftest import make_site


@pytest.mark.parametrize("args", [["version", "--json"], ["--version", "--json"], ["--json", "--version"]])
def test_version_as_json(tmp_path: Path, sk: Callable[..., Ran], args: list[str]) -> None:
    ran = sk(tmp_path, *args)
    assert ran.code == 0 and ran.json()["version"] == __version__ and ran.json()["command"] == "version"


def test_version_human(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    assert sk(tmp_path, "version").stdout == f"storekit {__version__}\n"


def test_verbose_adds_where_and_keeps_the_error_last(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    plain = sk(tmp_path, "--config", str(tmp_path / "nope.toml"), "status")
    verbose = sk(tmp_path, "-v", "--config", str(tmp_path / "nope.toml"), "status")
    assert plain.code == verbose.code == 3
    assert "Traceback" not in plain.stderr and "Traceback (most recent call last)" in verbose.stderr
    assert verbose.stderr.endswith(plain.stderr)  # the same error and hint close it
    assert sk(tmp_path, "status", "--verbose", "--config", str(tmp_path / "nope.toml")).code == 3


def test_storekit_tier_picks_the_tier(
    tmp_path: Path, sk: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_site(tmp_path)
    monkeypatch.setenv("STOREKIT_TIER", "nvme")
    doc = sk(tmp_path, "layout", "check", "--json").json()
    assert [t["tier"] for t in doc["tiers"]] == ["nvme"]
    assert [
        t["tier"] for t in sk(tmp_path, "layout", "check", "--tier", "vault", "--json").json()["tiers"]
    ] == ["vault"]
    monkeypatch.setenv("STOREKIT_TIER", "nosuch")
    ran = sk(tmp_path, "layout", "check")
    assert (
        ran.code == 3
        and ran.stderr.splitlines()[0] == "error: $STOREKIT_TIER=nosuch names no tier in storekit.toml"
    )


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan"])
def test_a_bad_progress_interval_is_refused(
    tmp_path: Path, sk: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("STOREKIT_PROGRESS_INTERVAL", value)
    ran = sk(tmp_path, "init", "--dry-run")
    assert ran.code == 2 and ran.stdout == ""
    assert (
        ran.stderr
        == f"error: $STOREKIT_PROGRESS_INTERVAL={value!r}: expected seconds above 0, e.g. 10 or 0.5\n"
    )


def test_no_color_switch(tmp_path: Path, sk: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "")  # recorded, so that what main() sets is undone after the test
    monkeypatch.delenv("NO_COLOR")
    ran = sk(tmp_path, "--no-color", "init", "--dry-run")
    assert ran.code == 0 and "\x1b[" not in ran.stdout + ran.stderr
    assert os.environ.get("NO_COLOR") == "1"  # what rich and child processes read


def test_every_storekit_variable_is_in_the_readme() -> None:
    readme = (REPO / "README.md").read_text()
    used = set()
    for path in (REPO / "storekit").rglob("*.py"):
        used |= set(re.findall(r"\bSTOREKIT_[A-Z_]+[A-Z]\b", path.read_text()))
    internal = {v for v in used if v.startswith(("STOREKIT_TEST", "STOREKIT_FAULT"))}
    internal |= {"STOREKIT_BENCH_TOKEN", "STOREKIT_COMPLETE"}  # a run's own secret; shell completion's hook
    missing = sorted(v for v in used - internal if f"`{v}`" not in readme)
    assert missing == []


def test_documented_job_commands_are_listed_in_help(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    listed = sk(tmp_path, "jobs", "--help").stdout
    for command in ("run-task", "finalize"):
        assert re.search(rf"^\s+{command}\s", listed, re.M), listed
