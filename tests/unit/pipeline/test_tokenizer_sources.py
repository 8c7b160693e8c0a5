"""Tokenizer references (file, folder, cached hub name) and source discovery details."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import zstandard

from storekit.errors import InputError, NotFoundError
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.sources import discover_sources, uncompressed_size
from storekit.pipeline.tokenizer import resolve_tokenizer
from tests.conftest import run_cli
from tests.unit.pipeline.helpers import REPO, TOKENIZER, expected_ids, sample_records, write_jsonl

TOKENIZER_JSON = gzip.decompress((REPO / "storekit/samples/anthropic-bpe-65k.tokenizer.json.gz").read_bytes())


def _folder(path: Path, eos: str | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "tokenizer.json").write_bytes(TOKENIZER_JSON)
    if eos:
        (path / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": eos}}))
    return path


def test_bundled_file_folder_and_cached_hub_name_are_the_same_tokenizer(
    tmp_path: Path, monkeypatch: Any
) -> None:
    bundled = resolve_tokenizer(TOKENIZER, eos=True, bos=False)
    folder = resolve_tokenizer(str(_folder(tmp_path / "tok")), eos=True, bos=False)
    # the local Hugging Face cache layout: models--org--name/{refs/main, snapshots/<rev>/}
    cache = tmp_path / "hf" / "hub" / "models--acme--bpe65k"
    _folder(cache / "snapshots" / "0123abc", eos="<META_END>")
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text("0123abc")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    hub = resolve_tokenizer("acme/bpe65k", eos=True, bos=False)
    assert bundled.xxh3_128 == folder.xxh3_128 == hub.xxh3_128  # hash of the uncompressed file
    assert (bundled.vocab_size, bundled.dtype, bundled.eos_id, bundled.eos_token) == (
        65000,
        "uint16",
        0,
        "<EOT>",
    )
    assert (hub.eos_token, hub.eos_id) == ("<META_END>", 3)  # tokenizer_config.json decides
    assert bundled.splittable and hub.splittable


def test_explicit_special_tokens_and_clear_errors(tmp_path: Path) -> None:
    info = resolve_tokenizer(TOKENIZER, eos=True, bos=True, eos_token="<META>", bos_token="<SOS>")
    assert (info.eos_id, info.bos_id) == (1, 4)
    with pytest.raises(Exception, match="not in the tokenizer's vocabulary"):
        resolve_tokenizer(TOKENIZER, eos=True, bos=False, eos_token="</s>")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"has no tokenizer\.json"):
        resolve_tokenizer(str(tmp_path / "empty"), eos=True, bos=False)
    with pytest.raises(NotFoundError):
        resolve_tokenizer(str(tmp_path / "missing.json"), eos=True, bos=False)


def test_cached_hub_tokenizer_end_to_end(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "hf" / "hub" / "models--acme--bpe65k"
    _folder(cache / "snapshots" / "rev1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    records = sample_records(limit_bytes=8_000)
    write_jsonl(tmp_path / "a.jsonl", records)
    res = run_cli(
        ["prepare", "dataset", "-i", "a.jsonl", "--tokenizer", "acme/bpe65k", "--json", "--quiet"], capsys
    )
    assert res.code == 0, res.stderr
    assert res.json()["manifest"]["tokenizer"]["name"] == "acme/bpe65k"
    assert res.json()["path"] == "datasets/text/a/v1"  # name derived from the input
    from tests.unit.pipeline.helpers import dataset_documents

    assert dataset_documents(tmp_path / "storage/datasets/text/a/v1") == expected_ids(
        [r["text"] for r in records]
    )


def test_uncompressed_size_from_trailer_header_or_counting(tmp_path: Path) -> None:
    data = b"".join(json.dumps(r).encode() + b"\n" for r in sample_records(limit_bytes=50_000))
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(data))
    (tmp_path / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    stream = zstandard.ZstdCompressor().compressobj()  # streamed: no content size in the frame header
    (tmp_path / "c.jsonl.zst").write_bytes(stream.compress(data) + stream.flush())
    fs = InputFS(None)
    for name, kind in (("a.jsonl.gz", "gz"), ("b.jsonl.zst", "zst"), ("c.jsonl.zst", "zst")):
        path = tmp_path / name
        assert uncompressed_size(fs, str(path), path.stat().st_size, kind) == len(data), name


def test_discovery_order_formats_and_hidden_files(tmp_path: Path) -> None:
    for rel in ("b/2.jsonl", "b/1.jsonl.gz", "a.parquet.txt", ".hidden/x.jsonl", "b/.swp.jsonl", "c.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(gzip.compress(b"") if rel.endswith(".gz") else b"")
    found = discover_sources([str(tmp_path)], forced_format="auto", text_key="text", fs=InputFS(None))
    got = [(Path(s.url).relative_to(tmp_path).as_posix(), s.format, s.compression) for s in found]
    assert got == [
        ("a.parquet.txt", "text", None),
        ("b/1.jsonl.gz", "jsonl", "gz"),
        ("b/2.jsonl", "jsonl", None),
        ("c.md", "text", None),
    ]
    again = discover_sources(
        [str(tmp_path / "b/*.jsonl*"), str(tmp_path / "b")],
        forced_format="jsonl",
        text_key="text",
        fs=InputFS(None),
    )
    assert [Path(s.url).name for s in again] == ["1.jsonl.gz", "2.jsonl"]  # each file once
