"""Same input and options -> byte-identical shards and manifest (timestamp aside), for any worker
count; exact dedup keeps the first occurrence in input order; the held-out split is chosen by hash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import xxhash

from tests.conftest import run_cli
from tests.unit.pipeline.helpers import (
    TOKENIZER,
    dataset_documents,
    expected_ids,
    sample_records,
    tree_bytes,
    write_jsonl,
)


def _corpus_with_duplicates() -> tuple[list[dict[str, Any]], list[str]]:
    """Real documents with exact and whitespace-variant repeats spread over the file."""
    base = sample_records(limit_bytes=120_000, max_doc=12_000)
    records: list[dict[str, Any]] = []
    for i, rec in enumerate(base):
        records.append(rec)
        if i % 4 == 3:
            records.append({"text": base[i - 3]["text"], "path": "dup-exact"})
        if i % 5 == 4:
            records.append({"text": "\n  " + base[i - 2]["text"] + "  \n\n", "path": "dup-space"})
    unique: list[str] = []
    seen: set[str] = set()
    for rec in records:
        key = rec["text"].strip()
        if key not in seen:
            seen.add(key)
            unique.append(rec["text"])
    return records, unique


def _prepare(capsys: Any, *args: str) -> Any:
    res = run_cli(
        ["prepare", "dataset", "--tokenizer", TOKENIZER, "--name", "det", "--json", "--quiet", *args], capsys
    )
    assert res.code == 0, res.stderr
    return res.json()


def test_byte_identical_for_any_worker_count(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    records, _ = _corpus_with_duplicates()
    write_jsonl(tmp_path / "in" / "part-1.jsonl", records[: len(records) // 2])
    write_jsonl(tmp_path / "in" / "part-2.jsonl.gz", records[len(records) // 2 :], "gz")
    trees = []
    for workers in (1, 2, 3):
        out = tmp_path / f"out-w{workers}"
        doc = _prepare(
            capsys,
            "-i",
            "in/",
            "--workers",
            str(workers),
            "--output",
            str(out),
            "--task-size",
            "12KiB",
            "--shard-size",
            "24KiB",
            "--holdout",
            "0.2",
            "--keep-fields",
            "path",
        )
        assert doc["plan"]["tasks"] >= 8
        assert doc["manifest"]["shards"] >= 4
        trees.append(tree_bytes(out))
    assert trees[0] == trees[1] == trees[2]
    assert any(name.startswith("holdout-") for name in trees[0])


def test_dedup_first_occurrence_wins_across_tasks(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    records, unique = _corpus_with_duplicates()
    write_jsonl(tmp_path / "a.jsonl", records)
    doc = _prepare(capsys, "-i", "a.jsonl", "--workers", "2", "--task-size", "10KiB")
    timings = doc["timings"]  # the fast engine: one forked process per worker, their memory summed
    assert (timings["workers"], timings["worker_processes"]) == (2, 2)
    assert timings["peak_rss_bytes"] > timings["peak_rss_max_process_bytes"] > 0
    stats = doc["manifest"]["stats"]
    assert stats["docs_read"] == len(records)
    assert stats["docs_duplicate"] == len(records) - len(unique) > 5
    assert stats["docs_kept"] == len(unique)
    assert dataset_documents(tmp_path / "storage/datasets/text/det/v1") == expected_ids(unique)

    doc = _prepare(capsys, "-i", "a.jsonl", "--no-dedup", "--version", "v2", "--task-size", "10KiB")
    assert doc["manifest"]["stats"]["docs_duplicate"] == 0
    assert doc["manifest"]["stats"]["docs_kept"] == len(records)


def test_holdout_split_is_chosen_by_document_hash(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    records, unique = _corpus_with_duplicates()
    write_jsonl(tmp_path / "a.jsonl", records)
    doc = _prepare(capsys, "-i", "a.jsonl", "--holdout", "0.25", "--task-size", "10KiB")

    def held(text: str) -> bool:  # the documented rule: low 32 bits of xxh3-128(stripped text)
        return (xxhash.xxh3_128_intdigest(text.strip().encode()) & 0xFFFFFFFF) < 0.25 * 2**32

    dataset = tmp_path / "storage/datasets/text/det/v1"
    assert dataset_documents(dataset, "holdout") == expected_ids([t for t in unique if held(t)])
    assert dataset_documents(dataset, "train") == expected_ids([t for t in unique if not held(t)])
    splits = doc["manifest"]["splits"]
    assert 0 < splits["holdout"]["documents"] < splits["train"]["documents"]
    manifest = json.loads((dataset / "manifest.json").read_text())
    assert {s["split"] for s in manifest["shards"]} == {"train", "holdout"}
