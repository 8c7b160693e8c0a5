"""Issue #33 item 4: every input is a regular file or refused up front with one line naming it; a FIFO
(given with -i or inside an input directory) or an endless device never hangs a prepare, and nothing
is written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl

BASE = ["prepare", "dataset", "--tokenizer", TOKENIZER, "--name", "nr", "--json", "--quiet"]


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STOREKIT_CONFIG", raising=False)
    write_jsonl(tmp_path / "in" / "a.jsonl", sample_records(limit_bytes=4_000, max_doc=2_000))
    os.mkfifo(tmp_path / "in" / "b.jsonl")  # nobody ever writes it: reading would block forever
    os.mkfifo(tmp_path / "lone.jsonl")
    return tmp_path


CASES = [
    (["-i", "lone.jsonl"], "lone.jsonl: not a regular file (a FIFO)"),
    (["-i", "in"], "in/b.jsonl: not a regular file (a FIFO)"),
    (["-i", "in/*.jsonl"], "in/b.jsonl: not a regular file (a FIFO)"),
    (["-i", "/dev/zero"], "/dev/zero: not a regular file (a character device)"),
    (["--format", "text", "-i", "/dev/urandom"], "/dev/urandom: not a regular file (a character device)"),
    (["-i", "/dev/zer*"], "/dev/zero: not a regular file (a character device)"),
]


@pytest.mark.parametrize(("args", "expected"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_fifo_or_device_input_is_refused_in_one_line(
    cwd: Path, capsys: Any, args: list[str], expected: str
) -> None:
    res = run_cli([*BASE, *args], capsys)
    assert res.code == 1, res.stdout
    assert expected in res.json()["error"]["message"]
    assert "regular files only" in res.json()["error"]["message"]
    assert not (cwd / "storage").exists()  # refused before anything was written (no lease, no work dir)


NAMED = [
    (["prepare", "dataset", "spec.toml"], "spec.toml"),
    (["prepare", "dataset", "--tokenizer", "tok.json", "--name", "nr", "-i", "in/a.jsonl"], "tok.json"),
    ([*BASE, "-i", "in/a.jsonl", "--config", "site.toml"], "site.toml"),
    (["layout", "check", "--layout", "lay.toml"], "lay.toml"),
]


@pytest.mark.parametrize(("args", "fifo"), NAMED, ids=[c[1] for c in NAMED])
def test_a_fifo_given_as_a_pipeline_tokenizer_config_or_layout_file_is_named_for_what_it_is(
    cwd: Path, capsys: Any, args: list[str], fifo: str
) -> None:
    """Such a FIFO was reported as a file that 'does not exist' (exit 3) while it was right there;
    now it is refused as what it is (exit 1), without opening it."""
    os.mkfifo(cwd / fifo)
    res = run_cli([*args, "--json"], capsys)
    assert res.code == 1, res.stdout
    assert f"{fifo}: not a regular file (a FIFO)" in res.json()["error"]["message"]
    assert not (cwd / "storage").exists()
