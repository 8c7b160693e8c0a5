"""Each option of `bench io` and `prepare dataset` is declared once (storekit.options.Option): the
command's parameters, the spec's defaults and the pipeline file's keys all come from that one table,
so removing an entry removes the flag, and a value given reaches the spec through the option's reader."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer
from typer._click.exceptions import NoSuchOption
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.main import get_command

from storekit.bench.options import IO_OPTIONS
from storekit.bench.spec import DEFAULTS as BENCH_DEFAULTS
from storekit.bench.spec import BenchSpec, TargetSpec, build_spec
from storekit.cli.app import build_app
from storekit.cli.bench import IO_TABLE
from storekit.cli.common import Command
from storekit.cli.declared import declared_command
from storekit.cli.prepare import PREPARE_TABLE
from storekit.cli.prepare_slurm import SLURM_OPTIONS, slurm_options
from storekit.errors import ConfigError, UsageError
from storekit.options import Option
from storekit.pipeline.options import PIPELINE_OPTIONS
from storekit.pipeline.spec import CLI_SOURCE, PipelineSpec, load_pipeline_file
from storekit.pipeline.spec import build_spec as build_pipeline

TABLES = {("bench", "io"): IO_TABLE, ("prepare", "dataset"): PREPARE_TABLE}


def command(path: Sequence[str]) -> Command:
    cmd: Command = get_command(build_app())  # as Typer builds it, before tidy_options
    for word in path:
        assert isinstance(cmd, TyperGroup)
        sub = cmd.commands[word]
        assert isinstance(sub, TyperGroup | TyperCommand)
        cmd = sub
    return cmd


def declared_flags(opt: Option) -> list[str]:
    return [f for flag in opt.flags for f in flag.split("/")]


@pytest.mark.parametrize("path", list(TABLES), ids=[" ".join(p) for p in TABLES])
def test_every_parameter_comes_from_the_table(path: tuple[str, ...]) -> None:
    """Name, order, flags, default, help, metavar and help section of each parameter are the
    declaration's; the command has no parameter the table lacks."""
    table = TABLES[path]
    params = [p for p in command(path).params if p.name != "help"]
    assert [p.name for p in params] == [o.name for o in table]
    for param, opt in zip(params, table, strict=True):
        if opt.argument:
            assert isinstance(param, TyperArgument) and param.metavar == opt.metavar
            continue
        assert isinstance(param, TyperOption)
        assert param.opts + param.secondary_opts == declared_flags(opt), opt.name
        assert param.default == opt.cli_value, opt.name
        assert param.help == opt.help and param.metavar == opt.metavar, opt.name
        assert param.rich_help_panel == opt.panel, opt.name


def test_removing_an_entry_removes_the_flag() -> None:
    """A command built from the table without --seed has no --seed: the flag is refused, and every
    other option still parses and reaches the command."""
    seen: list[SimpleNamespace] = []

    def run(given: SimpleNamespace) -> None:
        seen.append(given)

    app = typer.Typer()
    app.command()(declared_command([o for o in IO_TABLE if o.name != "seed"], run))
    cmd = get_command(app)
    assert "--seed" not in {name for p in cmd.params for name in p.opts}
    with pytest.raises(NoSuchOption):
        cmd.main(["--seed", "1"], standalone_mode=False)
    cmd.main(["--repeat", "5", "--no-direct", "-w", "2,8"], standalone_mode=False)
    (given,) = seen
    assert "seed" not in vars(given)
    assert (given.repeat, given.direct, given.workers, given.pattern) == (5, False, "2,8", "all")


def test_an_option_or_a_flag_declared_twice_is_refused() -> None:
    def run(given: SimpleNamespace) -> None:
        raise AssertionError("never runs")

    seed = next(o for o in IO_TABLE if o.name == "seed")
    with pytest.raises(ValueError, match=r"^declared twice: --seed, seed$"):
        declared_command([*IO_TABLE, seed], run)
    with pytest.raises(ValueError, match=r"^declared twice: --no-direct$"):
        declared_command([*IO_TABLE, Option(name="cached", flags=("--cached/--no-direct",), type=bool)], run)


def test_bench_defaults_and_spec_come_from_the_declarations() -> None:
    """DEFAULTS is the table's, and build_spec reads what the command line gives with each
    option's reader: a value typed for an option lands in the spec field the option names."""
    spec_options = [o for o in IO_OPTIONS if o.field]
    assert {o.name: o.default for o in spec_options} == BENCH_DEFAULTS
    assert {o.field for o in spec_options} <= {f.name for f in fields(BenchSpec)}
    target = TargetSpec(kind="posix", root="/nonexistent")
    typed = {"workers": "8,2", "block_size": "4k,1M", "duration": "2m", "small_file_size": "1k", "seed": 7}
    spec = build_spec(target, **typed)
    assert (spec.workers, spec.block_sizes, spec.duration) == ((2, 8), (4096, 1 << 20), 120.0)
    assert (spec.small_file_size, spec.seed) == (1024, 7)
    with pytest.raises(UsageError, match=r"^--queue-depth: 5000 is out of range; expected 1 to 4096$"):
        build_spec(target, queue_depth="1,5000")  # the range its declaration gives


def test_pipeline_fields_keys_and_defaults_come_from_the_declarations(tmp_path: Path) -> None:
    """Every PipelineSpec field is one declared option; a pipeline file's keys are the declared
    ones (each loads as its option, a key no option declares is refused, naming the keys of its
    table); what neither the file nor the command line gives is the declared default."""
    assert {o.name for o in PIPELINE_OPTIONS} == {f.name for f in fields(PipelineSpec)} - {"source"}
    pipeline = tmp_path / "p.toml"
    for opt in PIPELINE_OPTIONS:
        table, key = str(opt.key).split(".")
        pipeline.write_text(f"[{table}]\n{key} = 1\n")
        assert load_pipeline_file(pipeline) == {"name": "p", opt.name: 1}
    pipeline.write_text('[input]\npaths = ["a.jsonl"]\n[tokenizer]\npath = "t.json"\n')
    spec = build_pipeline(str(pipeline), load_pipeline_file(pipeline), {})
    given = {"name": "p", "inputs": ("a.jsonl",), "tokenizer": "t.json"}
    assert {o.name: getattr(spec, o.name) for o in PIPELINE_OPTIONS} == {
        o.name: given.get(o.name, o.default) for o in PIPELINE_OPTIONS
    }
    pipeline.write_text("[split]\nshare = 0.1\n")
    with pytest.raises(ConfigError, match=r"split\.share: unknown key; expected one of holdout$"):
        load_pipeline_file(pipeline)


def test_a_pipeline_option_is_read_with_its_reader_in_a_file_and_on_the_command_line() -> None:
    """The same reader and words for `--holdout 2` and `[split] holdout = 2`; only where differs."""
    base = {"name": "x", "inputs": ("a",), "tokenizer": "t"}
    with pytest.raises(ConfigError) as flag:
        build_pipeline(CLI_SOURCE, base, {"holdout": 2.0})
    with pytest.raises(ConfigError) as key:
        build_pipeline("p.toml", {**base, "holdout": 2.0}, {})
    assert str(flag.value) == "<command line>: --holdout: expected a fraction in [0, 1), e.g. 0.01, got 2.0"
    assert str(key.value) == "p.toml: split.holdout: expected a fraction in [0, 1), e.g. 0.01, got 2.0"


def test_each_slurm_option_fills_the_slurm_options_field_it_names() -> None:
    """`prepare dataset`'s --slurm-* values reach SlurmOptions by their declarations: each to its
    field, --slurm-extra as a tuple, --slurm-no-requeue as requeue=False."""
    given = {o.name: f"value-{o.name}" for o in SLURM_OPTIONS if o.field}
    given |= {
        "slurm_extra": ["--constraint=a", "--gres=gpu:1"],
        "slurm_no_requeue": True,
        "slurm_wait": False,
    }
    options = slurm_options(given)
    for opt in SLURM_OPTIONS:
        if opt.field and opt.name != "slurm_extra":
            assert getattr(options, opt.field) == given[opt.name], opt.name
    assert (options.extra, options.requeue) == (("--constraint=a", "--gres=gpu:1"), False)
    defaults = slurm_options({o.name: o.cli_value for o in SLURM_OPTIONS})
    assert (defaults.extra, defaults.requeue, defaults.tasks_per_element) == ((), True, 1)
