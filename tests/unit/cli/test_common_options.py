"""Common options (--config, --json, -q/--quiet) before and after the subcommand, as git/kubectl users
type them; the README's Slurm-epilog and cron lines run as written (from another directory), and
--quiet leaves stdout empty unless the output is what was asked for."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO, Ran, storekit_env
from tests.unit.tier.conftest import dcp_unit, make_site


def readme_line(pattern: str) -> str:
    """The one README command line matching `pattern` (its `# comment` cut off)."""
    found = []
    for line in (REPO / "README.md").read_text().splitlines():
        spans = re.findall(r"`([^`]+)`", line) or [line]  # an inline `code` span, or a code-block line
        found += [re.sub(r"\s+#.*$", "", s).strip() for s in spans if re.search(pattern, s)]
    assert len(found) == 1, found
    return found[0]


def storekit_on_path(tmp: Path) -> dict[str, str]:
    """An environment where `storekit` is this checkout's CLI (a wrapper script on PATH)."""
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    wrapper = bindir / "storekit"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m storekit "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = storekit_env()
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    return env


def sh(line: str, cwd: Path, env: dict[str, str]) -> Ran:
    proc = subprocess.run(["sh", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    return Ran(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    make_site(root)
    dcp_unit(root / "nvme/checkpoints/run_001", "step_000300")
    return root


def test_readme_epilog_line_drains_silently(site: Path, tmp_path: Path) -> None:
    line = readme_line(r"storekit --config /etc/storekit.toml tier --drain")
    assert line == "storekit --config /etc/storekit.toml tier --drain --quiet || true"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # only the config's path is this test's; the line is run as the epilog runs it, from another cwd
    ran = sh(
        line.replace("/etc/storekit.toml", str(site / "storekit.toml")), elsewhere, storekit_on_path(tmp_path)
    )
    assert (ran.code, ran.stdout, ran.stderr) == (0, "", "")
    copied = site / "lustre/checkpoints/run_001/step_000300"
    assert sorted(p.name for p in copied.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    # `|| true` must not hide a failure that the same line without it reports
    broken = line.replace("/etc/storekit.toml", str(tmp_path / "nope.toml")).replace(" || true", "")
    ran = sh(broken, elsewhere, storekit_on_path(tmp_path))
    assert ran.code == 3 and ran.stdout == ""
    assert ran.stderr.startswith(f"error: config file {tmp_path / 'nope.toml'} does not exist")


def test_readme_cron_line_writes_the_file_and_prints_nothing(site: Path, tmp_path: Path) -> None:
    line = readme_line(r"storekit status --prometheus .* --quiet")
    prom = tmp_path / "textfile/storekit.prom"
    prom.parent.mkdir()
    env = {**storekit_on_path(tmp_path), "STOREKIT_CONFIG": str(site / "storekit.toml")}
    ran = sh(line.replace("/var/lib/node_exporter/textfile/storekit.prom", str(prom)), tmp_path, env)
    assert (ran.code, ran.stdout, ran.stderr) == (0, "", "")
    text = prom.read_text()
    up = dict(re.findall(r'^storekit_tier_up\{tier="(\w+)",role="\w+"\} (\d)$', text, re.M))
    assert up == {"nvme": "1", "lustre": "1", "vault": "1"}


@pytest.mark.parametrize(
    "before, after",
    [
        (["--json"], ["status"]),
        (["-q", "--json"], ["status"]),
        (["--config", "CFG"], ["status", "--json"]),
        (["--config=CFG", "--json"], ["layout", "check"]),
        (["-c", "CFG"], ["layout", "--json", "check", "--all"]),
    ],
)
def test_common_options_before_the_subcommand(
    site: Path, tmp_path: Path, sk: Callable[..., Ran], before: list[str], after: list[str]
) -> None:
    cfg = str(site / "storekit.toml")
    args = [a.replace("CFG", cfg) for a in before + after]
    cwd = site if "CFG" not in " ".join(before + after) else tmp_path
    ran = sk(cwd, *args)
    assert ran.code == 0, ran.stderr
    doc = ran.json()
    assert doc["command"] in ("status", "layout check")
    assert {t["tier"] for t in doc["tiers"]} >= {"lustre"}


def test_common_option_before_and_after_agree(site: Path, sk: Callable[..., Ran]) -> None:
    before = sk(site, "--json", "layout", "show")
    after = sk(site, "layout", "show", "--json")
    assert before.code == after.code == 0
    assert before.stdout == after.stdout and before.json()["command"] == "layout show"


@pytest.mark.parametrize(
    "args",
    [
        ["init", "--quiet"],
        ["layout", "check", "--quiet"],
        ["layout", "clean", "--quiet"],
        ["status", "--quiet"],
        ["-q", "tier", "--drain", "--dry-run"],
    ],
)
def test_quiet_prints_nothing(site: Path, sk: Callable[..., Ran], args: list[str]) -> None:
    ran = sk(site, *args)
    assert (ran.code, ran.stdout, ran.stderr) == (0, "", "")


def test_quiet_still_prints_what_was_asked_for(site: Path, sk: Callable[..., Ran]) -> None:
    ran = sk(site, "--quiet", "--tier", "nvme", "ckpt", "latest", "run_001")
    assert ran.code == 2  # --tier is not common: it belongs after the command
    ran = sk(site, "--quiet", "ckpt", "latest", "run_001", "--tier", "nvme")
    assert ran.code == 0 and ran.stdout.strip().endswith("nvme/checkpoints/run_001/step_000300")
    ran = sk(site, "-q", "--json", "init")
    assert ran.code == 0 and ran.json()["command"] == "init"
