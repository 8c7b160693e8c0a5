"""The CLI framework is current Typer alone: no Click import, no deprecation warning, and the help
and errors storekit always printed (arguments listed once, `PATH` in usage lines, Click's wording
for an unknown option, `tier --drain` with or without a value)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Ran, run_cli, storekit_env

# builds the whole tree, prints every help and some usage errors in this one interpreter, then names
# what of Click (typer ships its own copy; a plain install has no `click`) and of pydantic (Typer's
# value conversion, ~0.07 s of import a run: storekit converts values itself) was imported
WHOLE_TREE = """
import sys
from storekit.cli.app import main
from storekit.cli.common import tidy_options
from typer.core import TyperGroup
from typer.main import get_command
from storekit.cli.app import app
def paths(cmd, path):
    yield path
    if isinstance(cmd, TyperGroup):
        for name, sub in cmd.commands.items():
            yield from paths(sub, [*path, name])
for path in paths(tidy_options(get_command(app)), []):
    try:
        main([*path, "--help"])
    except SystemExit as exc:
        assert exc.code == 0, (path, exc.code)
bad = [["layout", "check", "--jsn"], ["bench", "io", "--ranks", "x"], ["tier", "verify", "--sample", "2"]]
for args in bad:
    try:
        main(args)
    except SystemExit as exc:
        assert exc.code == 2, exc.code
imported = sorted(m for m in sys.modules if m.split(".")[0] in ("click", "pydantic"))
print("imported:", imported, file=sys.stderr)
"""


def python(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = storekit_env({"COLUMNS": "80"})
    env.pop("PYTHONWARNINGS", None)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_no_deprecation_warning_and_no_click_in_the_whole_tree(tmp_path: Path) -> None:
    # -W error: a deprecation warning anywhere in Typer, its Click or storekit's CLI is a crash here
    ran = python("-W", "error", "-c", WHOLE_TREE, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "Warning" not in ran.stderr, ran.stderr[-3000:]
    assert ran.stderr.splitlines()[-1] == "imported: []"
    assert "error: No such option '--jsn'. Did you mean '--json'?" in ran.stderr
    assert ran.stdout.count("Usage: storekit ") > 30  # every command's help was printed


def test_the_module_entry_point_is_clean_under_w_error(tmp_path: Path) -> None:
    for args in (["--help"], ["tier", "--help"], ["version"]):
        ran = python("-W", "error::DeprecationWarning", "-m", "storekit", *args, cwd=tmp_path)
        assert ran.returncode == 0 and ran.stderr == "", (args, ran.stderr[-3000:])
        assert ran.stdout.startswith("Usage: storekit" if "--help" in args else "storekit "), ran.stdout


def help_of(*path: str) -> str:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("COLUMNS", "80")
        ran: Ran = run_cli([*path, "--help"])
    assert ran.code == 0, ran.stderr
    return ran.stdout


def test_arguments_keep_their_usage_form_and_are_listed_once() -> None:
    verify = help_of("dataset", "verify")
    assert verify.startswith("Usage: storekit dataset verify [OPTIONS] PATH\n")
    assert verify.count("The dataset: tier-relative") == 1, verify  # one Arguments section
    assert "\nArguments:\n  PATH  The dataset:" in verify and "<str>" not in verify
    gc = help_of("tier", "gc")
    assert gc.startswith("Usage: storekit tier gc [OPTIONS] [PATH]...\n")
    assert gc.count("Tier-relative or absolute paths") == 1, gc
    status = help_of("jobs", "status")
    assert status.startswith("Usage: storekit jobs status [OPTIONS] [TARGET]\n")
    tier = help_of("tier")
    assert tier.startswith("Usage: storekit tier [OPTIONS] [COMMAND] [ARGS]...\n")


def test_unknown_options_and_missing_values_read_as_before() -> None:
    none_near = run_cli(["status", "--nosuch"])
    assert none_near.code == 2
    assert none_near.stderr.splitlines()[0] == "error: No such option '--nosuch'."
    missing = run_cli(["tier", "--archive"])
    assert missing.code == 2
    assert missing.stderr.splitlines()[0] == "error: Option '--archive' requires an argument."


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["bench", "io", "--ranks", "abc"], "'--ranks': 'abc' is not a valid integer."),
        (["bench", "io", "--bytes-per-param", "x"], "'--bytes-per-param': 'x' is not a valid float."),
        (["tier", "verify", "--sample", "1.5"], "'--sample': 1.5 is not in the range 0.0<=x<=1.0."),
        (["tier", "verify", "--sample", "y"], "'--sample': 'y' is not a valid float range."),
        (["ckpt", "prune", "run_001", "--keep-last", "2.0"], "'--keep-last': '2.0' is not a valid integer."),
    ],
)
def test_a_bad_number_names_what_was_given(args: list[str], line: str) -> None:
    # Typer 0.29 converts with pydantic ("Input should be a valid integer, unable to parse string as
    # an integer": the value is not named; "2.0" is 2); storekit keeps Click's rules and words
    ran = run_cli([*args, "--json"])
    assert ran.code == 2
    assert ran.stderr.splitlines()[0] == f"error: Invalid value for {line}"
    assert ran.json()["error"]["message"] == f"Invalid value for {line}"
