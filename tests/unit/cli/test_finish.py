"""Small things that make it look unfinished: blend -o refuses to overwrite without --force, one
dataset blended twice is refused, counts agree with their nouns, a run's rate is in the unit of its
summary (decimal MB/s), and one repeat shows no spread."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from storekit.cli.progress import ProgressState, progress_parts
from tests.conftest import Ran
from tests.unit.pipeline.helpers import TOKENIZER
from tests.unit.tier.conftest import dcp_unit


def prepared(tmp_path: Path, sk: Callable[..., Ran]) -> str:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"words number {i}"}) + "\n" for i in range(5)))
    ran = sk(tmp_path, "prepare", "dataset", "-i", str(src), "--tokenizer", TOKENIZER, "--name", "b", "-q")
    assert ran.code == 0, ran.stderr
    return "datasets/text/b/v1"


def test_blend_output_is_not_overwritten_silently(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    ds = prepared(tmp_path, sk)
    target = tmp_path / "blend.txt"
    target.write_text("someone's notes\n")
    ran = sk(tmp_path, "dataset", "blend", ds, "-o", str(target))
    assert ran.code == 2 and target.read_text() == "someone's notes\n"
    assert ran.stderr.splitlines()[0] == f"error: {target} exists; give --force to replace it"
    ran = sk(tmp_path, "dataset", "blend", ds, "-o", str(target), "--force")
    assert ran.code == 0 and ran.stdout == f"wrote {target} (args, 1 shard)\n"
    assert target.read_text().startswith("--data-path")


def test_one_dataset_twice_is_refused(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    ds = prepared(tmp_path, sk)
    ran = sk(tmp_path, "dataset", "blend", f"{ds}=0.5", f"{tmp_path}/storage/{ds}=0.5")
    assert ran.code == 2 and "name the same dataset" in ran.stderr


def test_one_checkpoint_is_one(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    dcp_unit(tmp_path / "storage/checkpoints/run_001", "step_000100")
    first = sk(tmp_path, "ckpt", "list", "run_001").stdout.splitlines()[0]
    assert first.endswith("(1 checkpoint)")


def test_a_runs_rate_is_decimal_as_its_summary() -> None:
    state = ProgressState("x", 10e9, 0.0, transfer=True)
    state.advance(5e9, {})
    parts = progress_parts(state, 10.0, bar=False)
    assert "500.0 MB/s" in parts and not any(re.search(r"[KMG]iB/s", p) for p in parts)


def test_one_repeat_shows_no_spread(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    target = tmp_path / "t"
    target.mkdir()
    args = [
        "bench",
        "io",
        "--target",
        str(target),
        "--pattern",
        "shards",
        "--size",
        "4M",
        "--file-size",
        "1M",
    ]
    ran = sk(tmp_path, *args, "--workers", "1", "--block-size", "1M", "--repeat", "1", "--no-direct")
    assert ran.code == 0, ran.stderr
    assert " 1 repeat " in ran.stdout
    rows = [line.split() for line in ran.stdout.splitlines() if line.startswith("shards ")]
    assert rows and all(row[6] == "-" for row in rows)  # pattern, w=1, bs=1M, phase, rate, unit, spread


def test_config_show_lines_up_and_shows_transfer_and_policies(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    (tmp_path / "storekit.toml").write_text(
        '[tiers.a]\nurl = "./a"\n[tiers.long-name]\nurl = "./a-much-longer-directory"\nrole = "archive"\n'
        "[tiers.long-name.transfer]\nthreads = 8\n"
        '[policies.old-runs]\naction = "archive"\nolder_than = "30d"\nkeep_last = 2\n'
    )
    ran = sk(tmp_path, "config", "show")
    assert ran.code == 0, ran.stderr
    lines = ran.stdout.splitlines()
    tiers = [line for line in lines if "layout=" in line]
    assert len({line.index("layout=") for line in tiers}) == 1  # one column
    assert tiers[1].endswith("layout=llm-cluster  transfer.threads=8")
    assert "policies:" in lines and any(line.split()[:2] == ["old-runs", "archive"] for line in lines)
    doc = sk(tmp_path, "config", "show", "--json").json()
    assert doc["tiers"][1]["transfer"] == {"threads": 8} and doc["policies"][0]["keep_last"] == 2
