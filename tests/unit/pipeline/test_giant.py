"""Giant documents take a chunked path (never one str in memory); the result must not differ at all:
same tokens as the tokenizer's encoding of the whole text, same dedup hash, same errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storekit.pipeline import giant
from tests.conftest import run_cli
from tests.unit.pipeline.helpers import (
    TOKENIZER,
    dataset_documents,
    expected_ids,
    sample_records,
    write_jsonl,
)

DS = Path("storage/datasets/text/g/v1")


@pytest.fixture(autouse=True)
def small_giants(monkeypatch: pytest.MonkeyPatch) -> None:
    """Anything above 64 KiB is 'giant', decoded in 8 KiB chunks: many chunk and piece boundaries."""
    monkeypatch.setattr(giant, "GIANT_BYTES", 64 << 10)
    monkeypatch.setattr(giant, "CHUNK_BYTES", 8 << 10)


def _giant_text(seed: int) -> str:
    body = "".join(r["text"] for r in sample_records(limit_bytes=150_000, skip=seed, max_doc=40_000))
    # escapes, non-ASCII, astral characters (a UCS-4 str), tabs, CRLF, quotes, backslashes
    return body + '\n"quoted" \\ back\\slash\tTAB\r\nnaïve café 😀 𝔘𝔫𝔦 end\n' + body[:20_000]


def test_giant_jsonl_documents_match_the_whole_text_encoding(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    small = sample_records(limit_bytes=6_000, max_doc=3_000)
    g1, g2 = _giant_text(10), _giant_text(40)
    lines = [
        json.dumps({"text": small[0]["text"], "src": "s0"}).encode(),
        json.dumps({"text": g1, "src": "g1"}, ensure_ascii=False).encode(),
        # the text key nested elsewhere first must not fool the scanner; escapes everywhere (ASCII JSON)
        json.dumps({"meta": {"text": "decoy", "n": [1, {"text": "x"}]}, "src": "g2", "text": g2}).encode(),
        json.dumps({"src": "dup", "text": "  \n" + g1 + "\n\n"}).encode(),  # same stripped text as g1
        b'{"src": "bad", "text": "' + b"x" * 70_000 + b'\\q bad escape"}',
        json.dumps({"text": small[1]["text"], "src": "s1"}).encode(),
    ]
    write_jsonl(tmp_path / "a.jsonl", lines)
    args = [
        "prepare",
        "dataset",
        "-i",
        "a.jsonl",
        "--tokenizer",
        TOKENIZER,
        "--name",
        "g",
        "--json",
        "--quiet",
        "--keep-fields",
        "src",
        "--workers",
        "1",
    ]
    res = run_cli(args, capsys)
    assert res.code == 0, res.stderr
    stats = res.json()["manifest"]["stats"]
    assert stats["docs_duplicate"] == 1
    assert stats["errors"] == {"malformed_json": 1}
    assert stats["error_examples"][0]["where"] == f"{tmp_path / 'a.jsonl'}:5"
    kept = [small[0]["text"], g1, g2, small[1]["text"]]
    assert dataset_documents(tmp_path / DS) == expected_ids(kept)
    meta = (tmp_path / DS / "train-00000.meta.jsonl").read_text().splitlines()
    assert [json.loads(m)["src"] for m in meta] == ["s0", "g1", "g2", "s1"]


def test_giant_and_normal_copies_of_a_text_are_one_document(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """The chunked hash is the plain hash: a giant text file and the same text in jsonl dedup."""
    monkeypatch.chdir(tmp_path)
    text = _giant_text(20)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text(text, encoding="utf-8")
    (tmp_path / "in" / "bad.txt").write_bytes(b"ok " * 30_000 + b"\xff\xfe not UTF-8" + b" more" * 10_000)
    monkeypatch.setattr(giant, "GIANT_BYTES", 10 << 20)  # the jsonl copy takes the normal path
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"text": text.strip()}])
    monkeypatch.setattr(giant, "GIANT_BYTES", 64 << 10)
    args = [
        "prepare",
        "dataset",
        "-i",
        "in/a.txt",
        "-i",
        "in/bad.txt",
        "-i",
        "in/b.jsonl",
        "--format",
        "auto",
        "--tokenizer",
        TOKENIZER,
        "--name",
        "g",
        "--json",
        "--quiet",
        "--workers",
        "1",
    ]
    res = run_cli(args, capsys)
    assert res.code == 0, res.stderr
    stats = res.json()["manifest"]["stats"]
    assert stats["errors"] == {"invalid_utf8": 1}
    assert stats["docs_duplicate"] == 1 and stats["docs_kept"] == 1
    assert dataset_documents(tmp_path / DS) == expected_ids([text])


def test_scanner_finds_only_the_top_level_string() -> None:
    raw = b'{"a": "te\\"xt", "nested": {"text": "no"}, "text" : "yes \\"q\\" \\\\", "z": [1, "text"]}'
    span = giant.locate_text(raw, "text")
    assert span is not None and raw[span[0] : span[1]] == b'yes \\"q\\" \\\\'
    assert giant.locate_text(b'{"text": 5}', "text") is None
    assert giant.locate_text(b'{"text": "unterminated', "text") is None
    assert giant.locate_text(b"[1, 2]", "text") is None
