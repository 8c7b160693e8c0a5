"""A run that keeps no document (a typo'd --text-key, an empty input) commits nothing and exits 1
naming the biggest reason; `--allow-empty` commits it anyway."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Ran
from tests.unit.pipeline.helpers import TOKENIZER

BASE = ["prepare", "dataset", "--tokenizer", TOKENIZER, "--workers", "1", "--quiet"]


def test_a_typo_in_text_key_publishes_nothing(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"document number {i}"}) + "\n" for i in range(20)))
    ran = sk(tmp_path, *BASE, "-i", str(src), "--name", "typo", "--text-key", "body", "--json")
    assert ran.code == 1
    error = ran.json()["error"]
    final = tmp_path / "storage/datasets/text/typo/v1"
    assert error["message"] == (
        f"{final.as_uri()}: no document was kept, nothing committed: 20 of 20 skipped as missing field "
        f"(first: {src}:1: no 'body' field)"
    )
    assert "--allow-empty" in error["hint"]
    assert not final.exists()
    assert "ok" not in sk(tmp_path, "dataset", "list").stdout  # nothing listed as a good dataset
    human = sk(tmp_path, *BASE, "-i", str(src), "--name", "typo", "--text-key", "body")
    assert human.code == 1 and human.stdout == ""
    assert [line for line in human.stderr.splitlines() if line.startswith("error:")] == [
        f"error: {error['message']}"
    ]


def test_an_empty_input_publishes_nothing_unless_allowed(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    src = tmp_path / "empty.jsonl"
    src.write_bytes(b"")
    ran = sk(tmp_path, *BASE, "-i", str(src), "--name", "empty", "--json")
    final = tmp_path / "storage/datasets/text/empty/v1"
    assert ran.code == 1 and ran.json()["error"]["message"].endswith(
        "no document was kept, nothing committed: the input holds no documents"
    )
    assert not final.exists()
    ran = sk(tmp_path, *BASE, "-i", str(src), "--name", "empty", "--allow-empty", "--json")
    assert ran.code == 0, ran.stderr
    manifest = json.loads((final / "manifest.json").read_bytes())
    assert manifest["stats"]["docs_kept"] == 0 and manifest["options"]["allow_empty"] is True
