"""Output that is not a terminal (a pipe, a file, cron mail) is whole: nothing cut or folded at 80
columns, no spaces padding the ends of lines, so `| grep`, `| cut` and `| tee` see whole names."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Ran, storekit_env

LONG = "a-dataset-name-long-enough-that-its-path-does-not-fit-in-eighty-columns-of-any-table-cell"


def test_layout_check_prints_whole_paths_and_no_padding(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    assert sk(tmp_path, "init", "-q").code == 0
    bad = tmp_path / f"storage/datasets/text/{LONG}/V1"  # misnamed: versions are v1, v2, ... or dates
    bad.mkdir(parents=True)
    ran = sk(tmp_path, "layout", "check")
    assert ran.code == 4
    lines = ran.stdout.splitlines()
    assert any(f"datasets/text/{LONG}/V1" in line for line in lines), ran.stdout
    assert [line for line in lines if line != line.rstrip()] == []


def test_dataset_list_through_a_pipe_keeps_the_tokenizer(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "some words to tokenize"}\n')
    tok = "bundled:anthropic-bpe-65k.tokenizer.json.gz"
    name = "pipe-" + LONG[:40]
    assert (
        sk(tmp_path, "prepare", "dataset", "-i", str(src), "--tokenizer", tok, "--name", name, "-q").code == 0
    )
    # a real pipe into another process, at COLUMNS=80 as in a terminal session's cron mail
    proc = subprocess.run(
        f'"{sys.executable}" -m storekit dataset list | cat',
        shell=True,
        cwd=tmp_path,
        env=storekit_env({"COLUMNS": "80"}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    (row,) = [line for line in proc.stdout.splitlines() if name in line]
    assert row.split()[-1] == tok and row.split()[0] == f"text/{name}/v1"
    assert [line for line in proc.stdout.splitlines() if line != line.rstrip()] == []
