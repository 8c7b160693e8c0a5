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
# THE table: every long option of every command and what it is given (None: a flag; several: the
# forms one meaning takes, e.g. a list that sweeps). A name means one thing: the same kind of value
# wherever it appears. A new option is added here, which makes whoever adds it look for the name
# an existing option already gives that meaning.
OPTIONS: dict[str, str | tuple[str, ...] | None] = {
    # every command
    "--config": "FILE",
    "--json": None,
    "--quiet": None,
    "--tier": "NAME",
    "--dry-run": None,
    "--layout": "NAME|FILE",
    "--force": None,
    "--output": ("REL|ABS-PATH|URL", "FILE"),  # where the result goes: a dataset, a blend's file
    "--format": "FORMAT",
    "--tokenizer": "PATH|NAME",
    "--prometheus": "FILE",
    "--seed": "N",
    "--workers": ("N", "N[,N...]"),  # bench io sweeps a list of worker counts
    "--work-dir": "DIR",  # where a job's work dirs go (prepare) or are looked for (jobs)
    "--task-ids": "3,4,7-9",  # plan task indexes
    "--executor": "local|slurm",
    # init, layout, status
    "--adopt": None,
    "--all": None,
    # prepare dataset
    "--input": "GLOB|DIR|FILE|s3://...",
    "--name": "NAME",
    "--version": "VERSION",
    "--kind": "text|code|multimodal",
    "--text-key": "KEY",
    "--keep-fields": "a,b",
    "--tokenizer-engine": "auto|hf|tiktoken",
    "--special-tokens": "match|text",
    "--bos": None,
    "--bos-token": "TOKEN",
    "--eos": None,
    "--eos-token": "TOKEN",
    "--dedup": None,
    "--min-chars": "N",
    "--max-chars": "N",
    "--max-doc-bytes": "SIZE",
    "--holdout": "FRACTION",
    "--shard-size": "SIZE",
    "--shard-tokens": "N",
    "--task-size": "SIZE",
    "--on-error": "skip|fail",
    "--allow-empty": None,
    # Slurm (prepare dataset, jobs rerun, bench io); --slurm-mem(-per-cpu) are Slurm's units
    "--slurm-account": "NAME",
    "--slurm-partition": "NAME",
    "--slurm-qos": "NAME",
    "--slurm-time": "TIME",
    "--slurm-mem": "SIZE",
    "--slurm-mem-per-cpu": "SIZE",
    "--slurm-cpus": "N",
    "--slurm-max-concurrent": "N",
    "--slurm-tasks-per-element": "N",
    "--slurm-job-name": "NAME",
    "--slurm-log-dir": "DIR",
    "--slurm-dependency": "DEP",
    "--slurm-extra": "OPTION",
    "--slurm-setup": "LINE",
    "--slurm-container": "PREFIX",
    "--slurm-no-requeue": None,
    "--slurm-wait": None,
    "--slurm-connect-timeout": "SECONDS",
    # dataset inspect
    "--shard": "NAME",
    "--start": "I",
    "--docs": "N",
    "--show-chars": "N",
    # ckpt prune
    "--keep-last": "N",
    "--keep-every": "K",
    "--incomplete-older-than": "AGE",
    # tier
    "--archive": "POLICY|PATH",
    "--drain": "[POLICY|PATH]",
    "--recall": "PATH",
    "--policy": "NAME",
    "--apply": "FILE",
    "--plan-out": "FILE",
    "--sample": "FRACTION",
    # jobs
    "--tasks": None,
    "--log": "FILE",
    "--log-dir": "DIR",
    # bench io
    "--target": "PATH|s3://BUCKET/PREFIX",
    "--endpoint-url": "URL",
    "--pattern": "PATTERN",
    "--size": "SIZE",
    "--file-size": "SIZE",
    "--small-file-size": "SIZE",
    "--block-size": "SIZE[,SIZE...]",
    "--queue-depth": "DEPTH",
    "--files": "N",
    "--repeat": "N",
    "--duration": "DURATION",
    "--direct": None,
    "--drop-caches": None,
    "--model": "MODEL",
    "--ranks": "N",
    "--full-checkpoint": None,
    "--bytes-per-param": "NUM",
    "--optimizer-bytes-per-param": "NUM",
    "--seq-len": "N",
    "--token-bytes": "N",
    "--gpus": "N",
    "--gpu-tokens-per-s": "NUM",
    "--target-checkpoint-s": "NUM",
    "--nodes": "N",
    "--coordinator-address": "HOST",
    "--plot": "FILE.png",
    "--print-schema": None,
}
# the Slurm options of `prepare dataset --executor slurm`, by the names bench io takes too
SLURM_NAMES = {"--slurm-partition", "--slurm-time", "--slurm-account"}


def options() -> Iterator[tuple[str, TyperOption]]:
    def walk(cmd: Command, path: str) -> Iterator[tuple[str, TyperOption]]:
        for p in cmd.params:
            if isinstance(p, TyperOption) and not p.hidden:  # hidden: set by storekit for its own
                yield path, p  # processes (tier --node-record), never typed by a user
        if isinstance(cmd, TyperGroup):
            for name, sub in cmd.commands.items():
                if not sub.hidden:
                    yield from walk(sub, f"{path} {name}".strip())

    yield from walk(tidy_options(get_command(build_app())), "")


def test_every_option_is_in_the_one_table() -> None:
    """Every option of every command (the root's own switches apart) is in OPTIONS and is given what
    the table says: one name, one kind of value, in every command that has it."""
    wrong = []
    for path, opt in options():
        if not path:
            continue  # --version, --install-completion: switches of `storekit` itself
        name = max(opt.opts, key=len)
        given = None if opt.is_flag else opt.metavar
        if name not in OPTIONS:
            wrong.append(f"{path}: {name} ({given}) is not in the table")
            continue
        allowed = OPTIONS[name]
        if given != allowed and not (isinstance(allowed, tuple) and given in allowed):
            wrong.append(f"{path}: {name} takes {given!r}, the table says {allowed!r}")
    assert wrong == []
    used = {max(opt.opts, key=len) for path, opt in options() if path}
    assert sorted(set(OPTIONS) - used) == []  # the table holds nothing no command has


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
        "tier": SLURM_NAMES,
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
