"""`dataset verify` / `dataset info`, `--dry-run`, the bundled sample, pipelines and their errors."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
import xxhash

from tests.conftest import run_cli
from tests.unit.pipeline.helpers import TOKENIZER, read_megatron, sample_records, write_jsonl

DS = "datasets/text/v/v1"


@pytest.fixture
def dataset(tmp_path: Path, monkeypatch: Any, capsys: Any) -> Path:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", sample_records(limit_bytes=60_000))
    res = run_cli(
        [
            "prepare",
            "dataset",
            "-i",
            "a.jsonl",
            "--tokenizer",
            TOKENIZER,
            "--name",
            "v",
            "--quiet",
            "--shard-size",
            "16KiB",
            "--workers",
            "1",
        ],
        capsys,
    )
    assert res.code == 0, res.stderr
    return tmp_path / "storage" / DS


def _rewrite_in_manifest(dataset: Path, name: str) -> None:
    """Make the manifest agree with a tampered file, so only the .idx/.bin check can catch it."""
    manifest = json.loads((dataset / "manifest.json").read_text())
    data = (dataset / name).read_bytes()
    for f in manifest["files"]:
        if f["path"] == name:
            f["size"], f["xxh3_128"] = len(data), xxhash.xxh3_128_hexdigest(data)
    (dataset / "manifest.json").write_text(json.dumps(manifest))


def test_verify_ok_then_detects_a_flipped_byte(dataset: Path, capsys: Any) -> None:
    res = run_cli(["dataset", "verify", DS, "--json"], capsys)
    assert res.code == 0, res.stderr
    doc = res.json()
    assert doc["ok"] is True and doc["shards_checked"] >= 2 and doc["problems"] == []
    path = dataset / "train-00001.bin"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    res = run_cli(["dataset", "verify", str(dataset), "--json"], capsys)  # absolute path works too
    assert res.code == 4
    problems = res.json()["problems"]
    assert [p["path"] for p in problems] == ["train-00001.bin"]
    assert "xxh3-128" in problems[0]["problem"]


def test_verify_detects_an_idx_inconsistent_with_its_bin(dataset: Path, capsys: Any) -> None:
    idx = dataset / "train-00000.idx"
    data = bytearray(idx.read_bytes())
    n = struct.unpack_from("<Q", data, 18)[0]
    pointer_at = 34 + 4 * n + 8 * 1  # the second sequence's byte offset
    struct.pack_into("<q", data, pointer_at, struct.unpack_from("<q", data, pointer_at)[0] + 2)
    idx.write_bytes(bytes(data))
    _rewrite_in_manifest(dataset, "train-00000.idx")
    res = run_cli(["dataset", "verify", DS], capsys)
    assert res.code == 4
    assert "train-00000.idx: index inconsistent with train-00000.bin: sequence 1 points at byte" in res.stdout

    # a .bin shorter than its index says
    shard = dataset / "train-00001.bin"
    shard.write_bytes(shard.read_bytes()[:-2])
    _rewrite_in_manifest(dataset, "train-00001.bin")
    res = run_cli(["dataset", "verify", DS, "--json"], capsys)
    assert res.code == 4
    assert any("but the .bin has" in p["problem"] for p in res.json()["problems"])


def test_verify_and_info_of_something_that_is_not_a_dataset(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "storage" / "datasets" / "x").mkdir(parents=True)
    assert run_cli(["dataset", "verify", "datasets/x"], capsys).code == 3
    res = run_cli(["dataset", "info", "datasets/x", "--json"], capsys)
    assert res.code == 3 and json.loads(res.stdout)["error"]["exit_code"] == 3


def test_info_summarises_the_manifest(dataset: Path, capsys: Any) -> None:
    res = run_cli(["dataset", "info", DS, "--json"], capsys)
    assert res.code == 0
    doc = res.json()
    assert doc["dataset"] == {"name": "v", "kind": "text", "version": "v1"}
    assert doc["tokenizer"]["vocab_size"] == 65000 and doc["tokenizer"]["eos"]["id"] == 0
    shards = doc["shard_list"]
    assert sum(s["documents"] for s in shards) == doc["stats"]["docs_kept"]
    for s in shards:  # every shard entry agrees with the files
        assert read_megatron(dataset / s["name"]).lengths.sum() == s["tokens"]
        assert xxhash.xxh3_128_hexdigest((dataset / s["bin"]).read_bytes()) == s["xxh3_128"]
    human = run_cli(["dataset", "info", DS], capsys)
    assert "text/v/v1" in human.stdout and "documents" in human.stdout


def test_dry_run_writes_nothing(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", sample_records(limit_bytes=60_000))
    res = run_cli(
        [
            "prepare",
            "dataset",
            "-i",
            "a.jsonl",
            "--tokenizer",
            TOKENIZER,
            "--dry-run",
            "--json",
            "--task-size",
            "16KiB",
        ],
        capsys,
    )
    assert res.code == 0, res.stderr
    plan = res.json()["plan"]
    assert res.json()["status"] == "planned"
    assert plan["tasks"] >= 3 and plan["sources"] == 1 and plan["estimated_tokens"] > 0
    assert plan["source_files"][0]["path"] == str(tmp_path / "a.jsonl")
    assert not (tmp_path / "storage").exists()
    human = run_cli(["prepare", "dataset", "-i", "a.jsonl", "--tokenizer", TOKENIZER, "-n"], capsys)
    assert "dry run: nothing written" in human.stdout and not (tmp_path / "storage").exists()


@pytest.mark.slow
def test_no_arguments_runs_the_bundled_sample_offline(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = run_cli(["prepare", "dataset", "--json", "--quiet"], capsys)
    assert res.code == 0, res.stderr
    doc = res.json()
    assert doc["path"] == "datasets/code/sample/v1"
    stats = doc["manifest"]["stats"]
    assert stats["docs_read"] == 255 and stats["docs_kept"] > 240 and stats["tokens"] > 1_000_000
    assert run_cli(["dataset", "verify", "datasets/code/sample/v1"], capsys).code == 0
    meta = (tmp_path / "storage/datasets/code/sample/v1/train-00000.meta.jsonl").read_text().splitlines()
    assert json.loads(meta[0]) == {"path": "Lib/argparse.py"}


def test_pipeline_file_with_flag_overrides(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", [{"body": r["text"]} for r in sample_records(60_000, max_doc=10_000)])
    (tmp_path / "p.toml").write_text(
        '[dataset]\nname = "web"\nversion = "v3"\n'
        '[input]\npaths = ["a.jsonl"]\ntext_key = "body"\n'
        f'[tokenizer]\npath = "{TOKENIZER}"\n'
        "[output]\nshard_tokens = 2000\n"
    )
    res = run_cli(["prepare", "dataset", "p.toml", "--version", "v4", "--json", "--quiet"], capsys)
    assert res.code == 0, res.stderr
    doc = res.json()
    assert doc["path"] == "datasets/text/web/v4"
    assert (
        doc["manifest"]["options"]["shard_tokens"] == 2000
        and doc["manifest"]["options"]["shard_bytes"] is None
    )
    info = run_cli(["dataset", "info", "datasets/text/web/v4", "--json"], capsys).json()
    assert all(s["tokens"] <= 2000 or s["documents"] == 1 for s in info["shard_list"])
    assert len(info["shard_list"]) > 3


@pytest.mark.parametrize(
    ("toml", "args", "message"),
    [
        ('[input]\npaths = ["a.jsonl"]\ncolour = 1\n', [], "p.toml: input.colour: unknown key"),
        ('[inputs]\npaths = ["a.jsonl"]\n', [], "p.toml: inputs: unknown table"),
        ("[split]\nholdout = 1.5\n", [], "p.toml: split.holdout: expected a fraction"),
        ('[output]\nshard_size = "big"\n', [], "p.toml: output.shard_size: 'big' is not a size"),
        ("", ["--holdout", "2"], "<command line>: --holdout: expected a fraction"),
        ("", ["--kind", "video"], "<command line>: --kind: expected one of text, code, multimodal"),
        ("[dataset\n", [], "p.toml: invalid TOML"),
    ],
)
def test_spec_errors_name_file_and_key(
    tmp_path: Path, monkeypatch: Any, capsys: Any, toml: str, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.toml").write_text(
        f'[tokenizer]\npath = "{TOKENIZER}"\n' + toml if "[dataset\n" not in toml else toml
    )
    res = run_cli(["prepare", "dataset", "p.toml", "-i", "a.jsonl", *args], capsys)
    assert res.code == 2, res.stderr
    assert message in res.stderr


def test_help_has_examples(capsys: Any) -> None:
    res = run_cli(["prepare", "dataset", "--help"], capsys)
    assert res.code == 0
    for flag in (
        "--input",
        "--text-key",
        "--shard-size",
        "--holdout",
        "--on-error",
        "--work-dir",
        "--dry-run",
    ):
        assert flag in res.stdout
    assert "storekit prepare dataset pipelines/sample.toml" in res.stdout  # a file that exists


def test_prepare_ends_with_the_megatron_data_path(dataset: Path, capsys: Any) -> None:
    args = [
        "prepare",
        "dataset",
        "-i",
        "a.jsonl",
        "--tokenizer",
        TOKENIZER,
        "--name",
        "v",
        "--shard-size",
        "16KiB",
    ]
    res = run_cli([*args, "--json"], capsys)
    assert res.code == 0, res.stderr
    doc = res.json()
    values = doc["megatron_args"]["--data-path"]
    weights, prefixes = [float(w) for w in values[0::2]], values[1::2]
    manifest = json.loads((dataset / "manifest.json").read_text())
    tokens = [s["tokens"] for s in manifest["shards"]]
    assert prefixes == [str(dataset / s["name"]) for s in manifest["shards"]]
    assert weights == pytest.approx([t / sum(tokens) for t in tokens], rel=1e-5)
    for prefix in prefixes:
        assert Path(prefix + ".bin").is_file() and Path(prefix + ".idx").is_file()
    human = run_cli(args, capsys)
    assert "next: train on it with Megatron-LM or NeMo" in human.stdout
    assert f"--data-path {values[0]} {prefixes[0]}" in " ".join(human.stdout.split())


def test_the_samples_bad_records_are_explained_where_they_are_counted() -> None:
    import io

    from rich.console import Console

    from storekit.cli.dataset_tables import render_manifest_summary

    examples = [
        {"where": "bundled:cpython-stdlib-sample.jsonl.gz:30", "reason": "empty", "detail": "no text"}
    ]
    stats = {
        "docs_read": 4,
        "docs_kept": 3,
        "docs_malformed": 1,
        "errors": {"empty": 1},
        "error_examples": examples,
    }
    buffer = io.StringIO()
    render_manifest_summary(Console(file=buffer, width=200), {"stats": stats})
    assert "the sample's empty files (__init__.py), kept in it on purpose" in buffer.getvalue()
    other = {**stats, "error_examples": [{**examples[0], "where": "a.jsonl:3"}]}
    buffer = io.StringIO()
    render_manifest_summary(Console(file=buffer, width=200), {"stats": other})
    assert "skipped and counted, not fatal (--on-error fail" in buffer.getvalue()
