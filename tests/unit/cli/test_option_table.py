"""One name and one meaning per option across commands, checked against one table: each short flag
stands for one long option everywhere, an option name means one thing (`--max-chars` drops documents;
a display limit is `--show-chars`), Slurm options have one spelling that every command accepts,
metavars say what to give (never TEXT/INTEGER/FLOAT), and a default is said once."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

from typer.core import TyperGroup, TyperOption
from typer.main import get_command

from storekit.cli.app import build_app
from storekit.cli.common import Command, tidy_options
from tests.conftest import Ran

# every short flag storekit has, and the one long option it stands for
SHORT = {
    "-c": "--config",
    "-q": "--quiet",
    "-t": "--tier",
    "-n": "--dry-run",
    "-l": "--layout",
    "-o": "--output",
    "-i": "--input",
    "-w": "--workers",
    "-p": "--pattern",
    "-r": "--repeat",
    "-b": "--block-size",
    "-N": "--nodes",
    "-h": "--help",
    "-f": "--format",
}
# options that exist in one command only because they mean one thing: where they are
ONE_MEANING = {
    "--max-chars": {"prepare dataset"},
    "--show-chars": {"dataset inspect"},
    # workers running at once: a local prepare's tasks, a Slurm element's tasks, bench's I/O processes
    "--workers": {"prepare dataset", "jobs run-task", "bench io"},
    # renamed to the --slurm-* names: accepted with a warning, never shown
    "--partition": None,
    "--time-limit": None,
    "--account": None,
}
# the Slurm options of `prepare dataset --executor slurm`, by the names bench io takes too
SLURM_NAMES = {"--slurm-partition", "--slurm-time", "--slurm-account"}


def options() -> Iterator[tuple[str, TyperOption]]:
    def walk(cmd: Command, path: str) -> Iterator[tuple[str, TyperOption]]:
        for p in cmd.params:
            if isinstance(p, TyperOption):
                yield path, p
        if isinstance(cmd, TyperGroup):
            for name, sub in cmd.commands.items():
                if not sub.hidden:
                    yield from walk(sub, f"{path} {name}".strip())

    yield from walk(tidy_options(get_command(build_app())), "")


def test_each_short_flag_means_one_option() -> None:
    wrong = []
    for path, opt in options():
        for short in [o for o in opt.opts + opt.secondary_opts if re.fullmatch(r"-[A-Za-z]", o)]:
            if SHORT.get(short) not in opt.opts:
                wrong.append(
                    f"{path}: {short} is {max(opt.opts, key=len)}, the table says {SHORT.get(short)}"
                )
    assert wrong == []


def test_an_option_name_means_one_thing() -> None:
    where: dict[str, set[str]] = {}
    for path, opt in options():
        for name in opt.opts:
            where.setdefault(name, set()).add(path)
    assert {name: where.get(name) for name in ONE_MEANING} == ONE_MEANING


def test_slurm_options_have_one_spelling_everywhere() -> None:
    commands_with_slurm = {}
    for path, opt in options():
        for name in SLURM_NAMES & set(opt.opts):
            commands_with_slurm.setdefault(path, set()).add(name)
    # jobs rerun retries a prepare with a longer limit or another partition (no account: the array's)
    assert commands_with_slurm == {
        "prepare dataset": SLURM_NAMES,
        "bench io": SLURM_NAMES,
        "jobs rerun": {"--slurm-partition", "--slurm-time"},
    }


def test_metavars_say_what_to_give_and_defaults_are_said_once(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    paths = sorted({path for path, _ in options()})
    found = []
    for path in paths:
        page = sk(tmp_path, *path.split(), "--help").stdout
        found += [f"{path}: {m}" for m in re.findall(r"--[a-z-]+ (?:TEXT|INTEGER|FLOAT)\b", page)]
        for line in re.split(r"\n(?=  -)", page):  # one option's entry at a time
            flat = " ".join(line.split())
            if "Default:" in flat and "[default:" in flat:
                found.append(f"{path}: {flat}")
    assert found == []


def test_workers_counts_workers_running_at_once_everywhere() -> None:
    helps = {path: " ".join((opt.help or "").split()) for path, opt in options() if "--workers" in opt.opts}
    assert set(helps) == ONE_MEANING["--workers"]
    for path, text in helps.items():
        assert text.startswith("Workers running at once "), (path, text)
        assert "-w" in next(o.opts for p, o in options() if p == path and "--workers" in o.opts)
    # a prepare on Slurm runs --slurm-cpus workers per element: --workers there is refused, not ignored
    assert "--executor slurm: each element runs --slurm-cpus workers" in helps["prepare dataset"]


def test_a_renamed_option_still_works_with_a_warning(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    page = sk(tmp_path, "bench", "io", "--help").stdout
    assert "--slurm-partition NAME" in page and "--partition" not in page.replace("--slurm-partition", "")
    for old, new, value in (
        ("--partition", "--slurm-partition", "debug"),
        ("--time-limit", "--slurm-time", "30"),
        ("--account", "--slurm-account", "ops"),
    ):
        then = sk(tmp_path, "bench", "io", "--target", str(tmp_path / "b"), new, value, "--dry-run")
        for spelling in (f"{old} {value}", f"{old}={value}"):
            ran = sk(tmp_path, "bench", "io", "--target", str(tmp_path / "b"), *spelling.split(), "--dry-run")
            assert ran.stderr == f"warning: {old} is deprecated; use {new}\n" + then.stderr
            assert (ran.code, ran.stdout) == (then.code, then.stdout)
        quiet = sk(tmp_path, "bench", "io", "--target", str(tmp_path / "b"), old, value, "--dry-run", "-q")
        assert "deprecated" not in quiet.stderr


def test_prepare_on_slurm_refuses_workers_in_one_line(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    ran = sk(tmp_path, "prepare", "dataset", "--executor", "slurm", "--workers", "4", "--dry-run")
    assert ran.code == 2
    assert ran.stderr.splitlines()[0] == (
        "error: --workers counts a local run's workers; with --executor slurm give --slurm-cpus"
    )
    assert not (tmp_path / "storage").exists()
