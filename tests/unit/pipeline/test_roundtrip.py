"""Every document in the shards decodes to the tokenizer's own encoding of the source, EOS included,
in source order, from every input format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.unit.pipeline.helpers import (
    EOS_ID,
    TOKENIZER,
    dataset_documents,
    expected_ids,
    read_megatron,
    sample_records,
    tokenizer,
    write_jsonl,
)

DATASET = Path("storage/datasets/text/rt/v1")


@pytest.fixture
def records() -> list[dict[str, Any]]:
    return sample_records(limit_bytes=150_000)


def _prepare(capsys: Any, *args: str) -> dict[str, Any]:
    res = run_cli(
        [
            "prepare",
            "dataset",
            "--tokenizer",
            TOKENIZER,
            "--name",
            "rt",
            "--json",
            "--quiet",
            "--workers",
            "1",
            *args,
        ],
        capsys,
    )
    assert res.code == 0, res.stderr
    return res.json()


def test_jsonl_round_trip_every_document(
    tmp_path: Path, monkeypatch: Any, capsys: Any, records: list[dict[str, Any]]
) -> None:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "in" / "a.jsonl", records)
    doc = _prepare(capsys, "-i", "in/a.jsonl", "--task-size", "40KiB")
    assert doc["status"] == "prepared"
    assert doc["plan"]["tasks"] > 2  # split finer than the file
    got = dataset_documents(tmp_path / DATASET)
    want = expected_ids([r["text"] for r in records])
    assert len(got) == len(want) == doc["manifest"]["stats"]["docs_kept"]
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, f"document {i} differs"
    assert doc["manifest"]["stats"]["tokens"] == sum(len(w) for w in want)
    # decoding gives the text back (byte-level BPE is lossless up to NFKC)
    tok = tokenizer()
    assert tok.decode(got[3][:-1]) == records[3]["text"]


def test_idx_header_and_dtype(
    tmp_path: Path, monkeypatch: Any, capsys: Any, records: list[dict[str, Any]]
) -> None:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", records[:5])
    _prepare(capsys, "-i", "a.jsonl")
    idx = (tmp_path / DATASET / "train-00000.idx").read_bytes()
    assert idx[:9] == b"MMIDIDX\x00\x00"
    assert int.from_bytes(idx[9:17], "little") == 1  # version
    assert idx[17] == 8  # uint16: a 65,000-token vocabulary
    n = int.from_bytes(idx[18:26], "little")
    assert n == 5 and int.from_bytes(idx[26:34], "little") == n + 1
    shard = read_megatron(tmp_path / DATASET / "train-00000")
    assert shard.dtype is np.uint16 and all(d[-1] == EOS_ID for d in shard.documents)


def test_long_document_encoded_in_pieces_matches_whole(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    """A 1.2M-character document is encoded in pieces (bounded memory) with identical ids."""
    monkeypatch.chdir(tmp_path)
    long_text = "".join(r["text"] for r in sample_records(limit_bytes=1_250_000, max_doc=400_000))
    assert len(long_text) > 1_100_000
    write_jsonl(tmp_path / "a.jsonl", [{"text": "short one"}, {"text": long_text}])
    _prepare(capsys, "-i", "a.jsonl")
    got = dataset_documents(tmp_path / DATASET)
    assert got == expected_ids(["short one", long_text])


def test_bos_and_no_eos(tmp_path: Path, monkeypatch: Any, capsys: Any, records: list[dict[str, Any]]) -> None:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", records[:5])
    doc = _prepare(capsys, "-i", "a.jsonl", "--bos", "--no-eos")
    tok = tokenizer()
    sos = tok.token_to_id("<SOS>")
    assert doc["manifest"]["tokenizer"]["bos"] == {"token": "<SOS>", "id": sos}
    got = dataset_documents(tmp_path / DATASET)
    assert got == [[sos, *tok.encode(r["text"], add_special_tokens=False).ids] for r in records[:5]]


def _write_all_formats(root: Path, records: list[dict[str, Any]]) -> dict[str, list[str]]:
    import pyarrow as pa
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "id": list(range(len(records))),
            "text": [r["text"] for r in records],
            "path": [r["path"] for r in records],
        }
    )
    write_jsonl(root / "gz" / "a.jsonl.gz", records, "gz")
    write_jsonl(root / "zst" / "a.jsonl.zst", records, "zst")
    (root / "pq").mkdir()
    pq.write_table(table, root / "pq" / "a.parquet", row_group_size=7)
    (root / "arrow").mkdir()
    feather.write_feather(table, root / "arrow" / "a.arrow", chunksize=5, compression="uncompressed")
    with pa.OSFile(str(root / "arrow" / "b.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        for batch in table.to_batches(max_chunksize=9):
            w.write_batch(batch)
    from datasets import Dataset

    Dataset.from_dict(table.to_pydict()).save_to_disk(str(root / "hf"), max_shard_size="100KB")
    for i, r in enumerate(records):
        (root / "txt" / f"{i:04d}.py").parent.mkdir(exist_ok=True)
        (root / "txt" / f"{i:04d}.py").write_text(r["text"], encoding="utf-8")
    return {
        "gz": ["-i", "gz/a.jsonl.gz"],
        "zst": ["-i", "zst/a.jsonl.zst"],
        "parquet": ["-i", "pq/", "--keep-fields", "path,id"],
        "arrow-file": ["-i", "arrow/a.arrow"],
        "arrow-stream": ["-i", "arrow/b.arrow"],
        "hf-disk": ["-i", "hf", "--format", "hf-disk"],
        "text": ["-i", "txt", "--format", "text", "--kind", "code"],
    }


@pytest.mark.slow
def test_every_input_format_gives_the_same_tokens(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    records = sample_records(limit_bytes=60_000)
    want = expected_ids([r["text"] for r in records])
    versions = {}  # one version per format: versions follow the layout's names (v1, v2, ...)
    for i, (name, args) in enumerate(_write_all_formats(tmp_path, records).items(), start=1):
        kind = "code" if name == "text" else "text"
        versions[name] = f"v{i}"
        doc = _prepare(capsys, *args, "--version", versions[name], "--task-size", "20KiB")
        got = dataset_documents(tmp_path / f"storage/datasets/{kind}/rt/{versions[name]}")
        assert got == want, name
        assert doc["manifest"]["stats"]["docs_kept"] == len(records), name
    meta = (
        (tmp_path / f"storage/datasets/text/rt/{versions['parquet']}/train-00000.meta.jsonl")
        .read_text()
        .splitlines()
    )
    assert [json.loads(m) for m in meta] == [{"id": i, "path": r["path"]} for i, r in enumerate(records)]
