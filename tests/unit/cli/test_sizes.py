"""One size grammar everywhere (K M G T P and KiB..PiB = 1024^n, KB..PB = 1000^n), stated in the help
of every option that takes a size."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.core import TyperGroup, TyperOption
from typer.main import get_command

from storekit.cli.app import build_app
from storekit.cli.common import Command
from storekit.units import SIZE_HELP
from tests.conftest import Ran
from tests.unit.pipeline.helpers import TOKENIZER

# options whose value is a size; --slurm-mem is passed to Slurm as it is (Slurm's own M/G, also 1024^n)
NOT_OURS = {"--slurm-mem", "--slurm-mem-per-cpu"}  # passed to sbatch as given: Slurm reads them
SLURMS_UNITS = "Slurm's units, M if none"  # what their help says instead, wherever they are


def size_options() -> list[tuple[str, TyperOption]]:
    found = []

    def walk(cmd: Command, path: str) -> None:
        if isinstance(cmd, TyperGroup):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}")
        for p in cmd.params:
            if isinstance(p, TyperOption) and "SIZE" in (p.metavar or ""):
                found.append((path, p))

    walk(get_command(build_app()), "storekit")
    return found


def test_every_size_option_states_the_grammar() -> None:
    options = size_options()
    names = {o.opts[0] for _, o in options}
    assert {
        "--shard-size",
        "--max-doc-bytes",
        "--task-size",
        "--size",
        "--file-size",
        "--block-size",
    } <= names
    assert "--small-file-size" in names
    missing = [
        f"{path} {o.opts[0]}"
        for path, o in options
        if (SLURMS_UNITS if o.opts[0] in NOT_OURS else SIZE_HELP) not in " ".join((o.help or "").split())
    ]
    assert missing == []


@pytest.mark.parametrize("text", ["2G", "2g", "2GiB"])
def test_g_means_the_same_in_prepare_and_bench(tmp_path: Path, sk: Callable[..., Ran], text: str) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "hello"}\n')
    prep = sk(
        tmp_path,
        "prepare",
        "dataset",
        "-i",
        str(src),
        "--tokenizer",
        TOKENIZER,
        "--name",
        "s",
        "--shard-size",
        text,
        "--dry-run",
        "--json",
    )
    assert prep.code == 0, prep.stderr
    (tmp_path / "target").mkdir()
    bench = sk(
        tmp_path, "bench", "io", "--target", str(tmp_path / "target"), "--size", text, "--dry-run", "--json"
    )
    assert bench.code == 0, bench.stderr
    shard_bytes = prep.json()["plan"]["options"]["shard_bytes"]
    assert shard_bytes == bench.json()["parameters"]["size"] == 2 * 2**30


def test_gb_is_decimal_in_both(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "hello"}\n')
    prep = sk(
        tmp_path,
        "prepare",
        "dataset",
        "-i",
        str(src),
        "--tokenizer",
        TOKENIZER,
        "--name",
        "s",
        "--shard-size",
        "2GB",
        "--dry-run",
        "--json",
    )
    assert prep.json()["plan"]["options"]["shard_bytes"] == 2 * 10**9
