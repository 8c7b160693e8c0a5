"""Every leaf command's --help at 80 columns: whole option names, no markup eaten, examples that name
real options and files, the exit codes it can end with; typos and usage errors under --json."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.core import TyperGroup
from typer.main import get_command

from storekit.cli.app import app
from storekit.cli.common import RENAMED, Command
from storekit.errors import EXIT_CODE_TABLE
from tests.conftest import REPO, Ran, run_cli, run_in_process

ROOT = get_command(app)


def leaves(group: Command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Command]]:
    if isinstance(group, TyperGroup):
        if path and group.invoke_without_command:
            yield path, group  # a group that acts on its own (`storekit tier --archive ...`)
        for name, sub in group.commands.items():
            yield from leaves(sub, (*path, name))
    else:
        yield path, group


LEAVES = dict(leaves(ROOT))


def help_text(path: tuple[str, ...]) -> str:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("COLUMNS", "80")
        result = run_cli([*path, "--help"])
    assert result.code == 0, result.stderr
    return result.stdout


def examples(text: str) -> list[list[str]]:
    """The example command lines of a help text, continuation lines joined, comments dropped."""
    block = text.split("Examples:", 1)[1].split("\n\n", 1)[0]
    commands: list[str] = []
    for raw in block.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if commands and commands[-1].endswith("\\"):
            commands[-1] = commands[-1][:-1] + " " + line
        elif line.startswith("|") and commands:
            commands[-1] += " " + line
        else:
            commands.append(line)
    return [shlex.split(c.split(" | ")[0].split("  #")[0], comments=True) for c in commands]


def test_the_cli_has_the_leaf_commands_this_test_knows() -> None:
    assert {" ".join(p) for p in LEAVES} >= {
        "init", "status", "layout check", "layout show", "prepare dataset", "dataset verify",
        "dataset info", "bench io", "config show", "config check",
    }  # fmt: skip


@pytest.mark.parametrize("path", list(LEAVES), ids=[" ".join(p) for p in LEAVES])
def test_leaf_help_is_readable_at_80_columns(path: tuple[str, ...]) -> None:
    text = help_text(path)
    too_long = [line for line in text.splitlines() if len(line) > 80]
    assert not too_long, too_long
    assert "…" not in text and "╭" not in text  # nothing cut short, no rich panels
    command = LEAVES[path]
    for param in command.params:
        if getattr(param, "hidden", False):  # set by storekit for its own processes, never typed
            assert not any(opt in text for opt in param.opts), f"{param.opts} is hidden but shown"
            continue
        for opt in [*param.opts, *param.secondary_opts]:
            if opt.startswith("-") and opt not in RENAMED:  # old spellings: accepted, never shown
                assert opt in text, f"{opt} missing from the help of {' '.join(path)}"
    codes = text.split("Exit codes:", 1)[1].split()
    listed = [int(tok) for tok in codes if tok.isdigit()]
    assert listed and listed[0] == 0 and set(listed) <= set(EXIT_CODE_TABLE), listed
    found = examples(text)
    assert found, f"{' '.join(path)} has no examples"
    for argv in found:
        assert argv[: 1 + len(path)] == ["storekit", *path], argv
        args = argv[1 + len(path) :]
        ctx = command.make_context(" ".join(argv[: -len(args) or None]), list(args), resilient_parsing=False)
        assert ctx.params is not None  # every option in the example exists and parses
        for arg in args:
            if arg.startswith(("pipelines/", "layouts/")):
                assert (REPO / arg).is_file(), f"example names {arg}, which does not exist"


def test_markup_is_not_eaten() -> None:
    assert "storekit[plot]" in help_text(("bench", "io"))


def test_a_typo_suggests_the_command_once() -> None:
    result = run_cli(["statsu"])
    output = result.stdout + result.stderr
    assert result.code == 2
    assert output.count("Did you mean 'status'?") == 1, output


def run(*args: str) -> Ran:
    return run_in_process(args)


@pytest.mark.parametrize(
    "args",
    [
        ("status", "--json", "--bogus"),
        ("layout", "check", "--json", "--tier"),
        ("bench", "io", "--json", "-r", "x"),
    ],
)
def test_json_usage_error_is_still_one_json_document(args: tuple[str, ...]) -> None:
    proc = run(*args)
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 1 and doc["error"]["exit_code"] == 2 and doc["error"]["message"]
    assert proc.stderr.startswith("error: ")  # the human message stays on stderr, one line


def test_print_schema_json_is_json() -> None:
    proc = run("bench", "io", "--print-schema", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "storekit.bench.io"
    assert doc["fields"]["results"]["type"] == "list" and "fields" in doc["fields"]["results"]
    assert run("bench", "io", "--print-schema").stdout.startswith("schema (str):")


def test_install_completion_gives_bash_working_completion(tmp_path: Path) -> None:
    home, bindir = tmp_path / "home", tmp_path / "bin"
    home.mkdir()
    bindir.mkdir()
    shim = bindir / "storekit"  # what `pip install` puts on PATH
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m storekit "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "HOME": str(home), "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    # run from bash: Typer detects the calling shell, which must not depend on how pytest was started
    install = ["bash", "-c", f"{shlex.quote(str(shim))} --install-completion bash; exit $?"]  # no exec
    proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    script = home / ".bash_completions" / "storekit.sh"
    assert f"source '{script}'" in (home / ".bashrc").read_text()

    def complete(words: str) -> list[str]:
        cword = len(words.split()) - 1
        line = (
            f"source {shlex.quote(str(script))}; COMP_WORDS=({words}); COMP_CWORD={cword}; "
            '_storekit_completion storekit; printf "%s\\n" "${COMPREPLY[@]}"'
        )
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert complete("storekit la") == ["layout"]
    assert "check" in complete("storekit layout c")
    assert complete("storekit layout check --a") == ["--all"]
