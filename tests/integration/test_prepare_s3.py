"""`prepare dataset` with inputs on and output to the real Ceph RGW (S3)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from storekit import faults
from storekit.config import TierConfig
from storekit.store import Store
from tests.conftest import run_cli, run_storekit
from tests.unit.pipeline.helpers import TOKENIZER, expected_ids, sample_records, write_jsonl

pytestmark = pytest.mark.ceph


def _config(tmp_path: Path, tier: TierConfig) -> Path:
    opts = "\n".join(f'{k} = "{v}"' for k, v in tier.options.items())
    path = tmp_path / "storekit.toml"
    path.write_text(
        f'default_tier = "local"\n[tiers.local]\nurl = "{tmp_path / "storage"}"\n'
        f'[tiers.archive]\nurl = "{tier.url}"\nrole = "archive"\n[tiers.archive.options]\n{opts}\n'
    )
    return path


def _documents_s3(store: Store, rel: str) -> list[list[int]]:
    import numpy as np

    manifest = json.loads(store.read_bytes(f"{rel}/manifest.json"))
    docs: list[list[int]] = []
    for shard in manifest["shards"]:
        idx = store.read_bytes(f"{rel}/{shard['idx']}")
        data = store.read_bytes(f"{rel}/{shard['bin']}")
        n = int.from_bytes(idx[18:26], "little")
        lengths = np.frombuffer(idx, dtype="<i4", count=n, offset=34)
        pointers = np.frombuffer(idx, dtype="<i8", count=n, offset=34 + 4 * n)
        for length, ptr in zip(lengths, pointers, strict=True):
            docs.append(np.frombuffer(data, dtype="<u2", count=int(length), offset=int(ptr)).tolist())
    return docs


def test_s3_input_and_output(
    tmp_path: Path, monkeypatch: Any, capsys: Any, s3_tier: TierConfig, s3_store: Store
) -> None:
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, s3_tier)
    records = sample_records(limit_bytes=80_000, max_doc=10_000)
    half = len(records) // 2
    s3_store.write_bytes(
        "raw/a.jsonl.gz", gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in records[:half]))
    )
    s3_store.write_bytes("raw/b.jsonl", b"".join(json.dumps(r).encode() + b"\n" for r in records[half:]))
    raw_url = f"{s3_tier.url}/raw/"
    args = [
        "prepare",
        "dataset",
        "-c",
        str(config),
        "-i",
        raw_url,
        "--tokenizer",
        TOKENIZER,
        "--name",
        "s3",
        "--tier",
        "archive",
        "--json",
        "--quiet",
        "--workers",
        "2",
        "--task-size",
        "16KiB",
        "--shard-size",
        "32KiB",
    ]
    res = run_cli(args, capsys)
    assert res.code == 0, res.stderr
    doc = res.json()
    assert doc["tier"] == "archive" and doc["manifest"]["stats"]["docs_kept"] == len(records)
    rel = "datasets/text/s3/v1"
    sources = json.loads(s3_store.read_bytes(f"{rel}/manifest.json"))["sources"]
    assert [(s["path"], s["size"]) for s in sources] == [
        (f"{raw_url}a.jsonl.gz", s3_store.info("raw/a.jsonl.gz").size),
        (f"{raw_url}b.jsonl", s3_store.info("raw/b.jsonl").size),
    ]
    assert _documents_s3(s3_store, rel) == expected_ids([r["text"] for r in records])
    assert not list((tmp_path / "storage" / "scratch").glob("storekit-prepare-*"))  # work dir removed

    # the same corpus prepared locally gives the same shard bytes
    write_jsonl(tmp_path / "raw" / "a.jsonl.gz", records[:half], "gz")
    write_jsonl(tmp_path / "raw" / "b.jsonl", records[half:])
    local = run_cli([*args[:5], "raw/", *args[6:10], "--output", str(tmp_path / "local"), *args[12:]], capsys)
    assert local.code == 0, local.stderr
    manifest = json.loads(s3_store.read_bytes(f"{rel}/manifest.json"))
    for shard in manifest["shards"]:
        assert (
            s3_store.read_bytes(f"{rel}/{shard['bin']}") == (tmp_path / "local" / shard["bin"]).read_bytes()
        )
        assert (
            s3_store.read_bytes(f"{rel}/{shard['idx']}") == (tmp_path / "local" / shard["idx"]).read_bytes()
        )

    url = f"{s3_tier.url}/{rel}"
    assert run_cli(["dataset", "verify", url, "-c", str(config)], capsys).code == 0
    info = run_cli(["dataset", "info", rel, "--tier", "archive", "-c", str(config), "--json"], capsys)
    assert info.code == 0 and info.json()["stats"]["docs_kept"] == len(records)
    again = run_cli(args, capsys)
    assert again.code == 0 and again.json()["status"] == "unchanged"

    # a flipped byte in an S3 shard is caught
    name = manifest["shards"][0]["bin"]
    data = bytearray(s3_store.read_bytes(f"{rel}/{name}"))
    data[10] ^= 0xFF
    s3_store.write_bytes(f"{rel}/{name}", bytes(data))
    assert run_cli(["dataset", "verify", url, "-c", str(config)], capsys).code == 4


@pytest.mark.slow
def test_s3_finalize_killed_then_resumed(tmp_path: Path, s3_tier: TierConfig, s3_store: Store) -> None:
    config = _config(tmp_path, s3_tier)
    records = sample_records(limit_bytes=60_000, max_doc=10_000)
    write_jsonl(tmp_path / "a.jsonl", records)
    args = [
        "prepare",
        "dataset",
        "-c",
        str(config),
        "-i",
        "a.jsonl",
        "--tokenizer",
        TOKENIZER,
        "--name",
        "k",
        "--tier",
        "archive",
        "--json",
        "--quiet",
        "--shard-size",
        "16KiB",
    ]
    killed = run_storekit(args, cwd=tmp_path, env={faults.ENV: "finalize.shard-closed@2=kill"})
    assert killed.code == -9
    rel = "datasets/text/k/v1"
    assert not s3_store.exists(f"{rel}/manifest.json")  # shards without a manifest: not a dataset
    assert s3_store.exists(f"{rel}/train-00000.bin")
    res = run_storekit(args, cwd=tmp_path)
    assert res.code == 0, res.stderr
    assert _documents_s3(s3_store, rel) == expected_ids([r["text"] for r in records])
    assert (
        run_storekit(["dataset", "verify", rel, "--tier", "archive", "-c", str(config)], cwd=tmp_path).code
        == 0
    )


def test_s3_inputs_are_listed_and_read_through_the_bucket_store(
    tmp_path: Path, s3_tier: TierConfig, s3_store: Store
) -> None:
    from storekit.config import load_config
    from storekit.pipeline.inputs import InputFS

    for rel, data in {
        "in/a.jsonl": b"aa",
        "in/b.jsonl": b"bbb",
        "in/.tmp.jsonl": b"x",
        "in/s/c.txt": b"c",
    }.items():
        s3_store.write_bytes(rel, data)
    fs = InputFS(load_config(str(_config(tmp_path, s3_tier))))
    base = f"{s3_tier.url}/in"
    assert fs.expand(f"{base}/*.jsonl") == [(f"{base}/a.jsonl", 2, None), (f"{base}/b.jsonl", 3, None)]
    assert fs.expand(base) == [
        (f"{base}/a.jsonl", 2, None),
        (f"{base}/b.jsonl", 3, None),
        (f"{base}/s/c.txt", 1, None),
    ]
    assert fs.expand(f"{base}/s/c.txt") == [(f"{base}/s/c.txt", 1, None)]
    assert fs.expand(f"{base}/.*.jsonl") == [(f"{base}/.tmp.jsonl", 1, None)]  # as a local glob
    assert fs.expand(f"{base}/none/*.jsonl") == [] and fs.expand(f"{base}/missing.jsonl") == []
    with fs.open(f"{base}/b.jsonl", block_size=2) as fh:
        assert fh.read() == b"bbb"
    store, key = fs.s3(f"{base}/b.jsonl")
    assert store.root == s3_tier.url.removeprefix("s3://").split("/")[0] and key.endswith("/in/b.jsonl")
