"""The `[slurm]` table of storekit.toml: site defaults under the --slurm-* flags, checked on read."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from storekit.config import parse_config
from storekit.errors import ConfigError
from tests.conftest import run_storekit
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl

SITE = """default_tier = "shared"
[tiers.shared]
url = "./storage"
[slurm]
partition = "cpu"
mem_per_cpu = "1G"
extra = ["--constraint=avx2"]
requeue = false
"""


def test_the_table_is_checked_naming_the_file_and_key(tmp_path: Path) -> None:
    site = parse_config(SITE.encode(), source="site.toml", base_dir=tmp_path)
    assert site.slurm == {
        "partition": "cpu",
        "mem_per_cpu": "1G",
        "extra": ("--constraint=avx2",),
        "requeue": False,
    }
    for bad, key in (('parition = "cpu"', "slurm.parition"), ("cpus = \"2\"", "slurm.cpus"),
                     ('extra = ["--array=0-3"]', "slurm")):  # fmt: skip
        with pytest.raises(ConfigError) as caught:
            parse_config(
                f'[tiers.a]\nurl = "./a"\n[slurm]\n{bad}\n'.encode(), source="site.toml", base_dir=tmp_path
            )
        assert caught.value.message.startswith(f"site.toml: {key}: "), caught.value.message


def test_flags_win_over_the_table_and_the_table_over_slurms_defaults(tmp_path: Path) -> None:
    cfg = tmp_path / "storekit.toml"
    cfg.write_text(SITE)
    (tmp_path / "storage").mkdir()
    write_jsonl(tmp_path / "corpus" / "a.jsonl", sample_records(200))
    args = ["prepare", "dataset", "-i", str(tmp_path / "corpus"), "--tokenizer", TOKENIZER, "--name", "w",
            "--executor", "slurm", "--dry-run", "--json", "--config", str(cfg)]  # fmt: skip
    no_slurm = {"PATH": str(Path(sys.executable).parent)}  # a dry run assumes Slurm's limits
    proc = run_storekit([*args, "--slurm-partition", "debug"], env=no_slurm)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    script = json.loads(proc.stdout)["slurm"]["sbatch"]["array"]
    assert "#SBATCH --partition=debug\n" in script  # the flag
    for line in ("--mem-per-cpu=1G", "--constraint=avx2", "--no-requeue"):  # the table
        assert f"#SBATCH {line}\n" in script, script


def test_a_pipelines_table_sits_between_the_flags_and_the_sites(tmp_path: Path) -> None:
    cfg = tmp_path / "storekit.toml"
    cfg.write_text(SITE)
    (tmp_path / "storage").mkdir()
    write_jsonl(tmp_path / "corpus" / "a.jsonl", sample_records(200))
    pipeline = tmp_path / "web.toml"
    pipeline.write_text(
        f'[input]\npaths = ["{tmp_path / "corpus"}"]\n[tokenizer]\npath = "{TOKENIZER}"\n'
        '[slurm]\npartition = "debug"\ntime = "30"\n'
    )
    args = [
        "prepare",
        "dataset",
        str(pipeline),
        "--executor",
        "slurm",
        "--dry-run",
        "--json",
        "--config",
        str(cfg),
    ]
    no_slurm = {"PATH": str(Path(sys.executable).parent)}
    proc = run_storekit([*args, "--slurm-time", "45"], env=no_slurm)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    script = json.loads(proc.stdout)["slurm"]["sbatch"]["array"]
    for line in ("--partition=debug", "--time=45", "--mem-per-cpu=1G"):  # pipeline, flag, site
        assert f"#SBATCH {line}\n" in script, script
    pipeline.write_text(pipeline.read_text() + "qos = 3\n")
    bad = run_storekit(args, env=no_slurm)
    assert bad.returncode == 2 and f"{pipeline}: slurm.qos: expected str" in bad.stdout, bad.stdout
