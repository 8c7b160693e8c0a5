"""`storekit prepare dataset` as a process: once the dataset is committed and reported the process
ends without the interpreter's teardown (storekit/exits.py), yet its output is whole, its atexit
handlers ran and a failed run still exits the ordinary way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import storekit_env
from tests.unit.pipeline.helpers import (
    TOKENIZER,
    dataset_documents,
    expected_ids,
    sample_records,
    write_jsonl,
)

# the entry point with two witnesses: an atexit handler, and an object only the teardown frees
SCRIPT = """
import atexit, pathlib, sys
from storekit.__main__ import main
marks = pathlib.Path(sys.argv.pop(1))
atexit.register(lambda: (marks / "atexit").write_text("ran"))
class Witness:
    def __del__(self):
        (marks / "teardown").write_text("ran")
witness = Witness()
sys.argv[0] = "storekit"
main()
"""


def _run(tmp_path: Path, marks: Path, *args: str) -> subprocess.CompletedProcess[str]:
    marks.mkdir()
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(marks), *args],
        cwd=tmp_path,
        env=storekit_env(),
        capture_output=True,  # pipes: block-buffered, so a missing flush would cut the document
        text=True,
        timeout=180,
        check=False,
    )


def test_a_committed_run_skips_the_teardown_with_whole_output(tmp_path: Path) -> None:
    records = sample_records(limit_bytes=60_000)
    write_jsonl(tmp_path / "a.jsonl", records)
    args = ["prepare", "dataset", "-i", "a.jsonl", "--tokenizer", TOKENIZER, "--name", "ex", "--json"]
    done = _run(tmp_path, tmp_path / "ok", *args, "--output", str(tmp_path / "ds"), "--workers", "2")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)  # the whole document reached the pipe
    assert doc["manifest"]["stats"]["docs_kept"] == len(records)
    assert dataset_documents(tmp_path / "ds") == expected_ids([r["text"] for r in records])
    assert (tmp_path / "ok" / "atexit").read_text() == "ran"
    assert not (tmp_path / "ok" / "teardown").exists()

    failed = _run(tmp_path, tmp_path / "bad", *args, "-i", "missing.jsonl", "--output", str(tmp_path / "d2"))
    assert failed.returncode == 3, failed.stderr
    assert json.loads(failed.stdout)["error"]["exit_code"] == 3
    assert (tmp_path / "bad" / "atexit").read_text() == "ran"
    assert (tmp_path / "bad" / "teardown").read_text() == "ran"  # the ordinary exit
