"""Help says what is true: positional arguments show their help, `--tier` of commands that cover every
tier says so, the exit codes a command can end with are listed, `layout check` lists every rule it
applies and `layout show` shows them, and no word is split at a hyphen at 80 columns."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.core import TyperArgument, TyperGroup
from typer.main import get_command

from storekit.cli.app import build_app
from storekit.cli.common import Command
from storekit.layout.check import RULES
from tests.conftest import Ran


def commands() -> Iterator[tuple[list[str], Command]]:
    def walk(cmd: Command, path: list[str]) -> Iterator[tuple[list[str], Command]]:
        yield path, cmd
        if isinstance(cmd, TyperGroup):
            for name, sub in cmd.commands.items():
                if not sub.hidden:
                    yield from walk(sub, [*path, name])

    yield from walk(get_command(build_app()), [])


def test_every_positional_argument_has_its_help_shown(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    missing = []
    for path, cmd in commands():
        arguments = [p for p in cmd.params if isinstance(p, TyperArgument)]
        if not arguments:
            continue
        page = " ".join(sk(tmp_path, *path, "--help").stdout.split())
        for arg in arguments:
            text = getattr(arg, "help", None)
            if not text or " ".join(text.split())[:40] not in page:
                missing.append(f"{' '.join(path)} {arg.name}")
    assert missing == []


def test_no_word_is_split_at_a_hyphen(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    split = []
    for path, _ in commands():
        for line in sk(tmp_path, *path, "--help").stdout.splitlines():
            if re.search(r"[A-Za-z]-$", line):
                split.append(f"{' '.join(path)}: {line.strip()}")
    assert split == []


@pytest.mark.parametrize("path", [["status"], ["config", "show"], ["config", "check"]])
def test_tier_of_a_command_over_every_tier(tmp_path: Path, sk: Callable[..., Ran], path: list[str]) -> None:
    page = " ".join(sk(tmp_path, *path, "--help").stdout.split())
    assert "default_tier" not in page and "Default: every tier in the config." in page


@pytest.mark.parametrize("path", [["status"], ["config", "show"]])
def test_exit_3_is_listed_where_a_config_or_tier_can_be_missing(
    tmp_path: Path, sk: Callable[..., Ran], path: list[str]
) -> None:
    assert re.search(r"^\s+3\s+not found", sk(tmp_path, *path, "--help").stdout, re.M)
    assert sk(tmp_path, *path, "--config", str(tmp_path / "none.toml")).code == 3


def test_layout_check_lists_and_layout_show_shows_every_rule(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    page = " ".join(sk(tmp_path, "layout", "check", "--help").stdout.split())
    assert [rule for rule in RULES if rule not in page] == []
    shown = sk(tmp_path, "layout", "show").stdout
    rows = dict(re.findall(r"^  ([a-z-]+) +(.+)$", shown, re.M))
    assert {rule: rows.get(rule) for rule in RULES} == RULES


@pytest.mark.parametrize("path", [["jobs", "status"], ["jobs", "rerun"]])
def test_tier_of_jobs_places_the_target_only(tmp_path: Path, sk: Callable[..., Ran], path: list[str]) -> None:
    page = " ".join(sk(tmp_path, *path, "--help").stdout.split())
    assert "Tier to act on" not in page  # it picks no jobs: every tier's scratch/ is searched
    assert "The tier a tier-relative TARGET is on." in page and "every POSIX tier's scratch/" in page


def test_a_tier_default_names_storekit_tier_first(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    wrong = []
    for path, _ in commands():
        page = " ".join(sk(tmp_path, *path, "--help").stdout.split())
        if "default_tier" in page and "Default: $STOREKIT_TIER, else the config's default_tier" not in page:
            wrong.append(" ".join(path))
    assert wrong == []
