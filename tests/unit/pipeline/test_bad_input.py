"""Bad input: each case gets a clear message naming the file and line (or path), `--on-error`
decides between skipping (counted in the manifest, examples logged) and failing, and nothing is ever
visible under the final name of a dataset that did not complete."""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli, run_in_process, run_storekit
from tests.unit.pipeline.helpers import (
    TOKENIZER,
    dataset_documents,
    expected_ids,
    sample_records,
    write_jsonl,
)

FINAL = Path("storage/datasets/text/bad/v1")
BASE = [
    "prepare",
    "dataset",
    "--tokenizer",
    TOKENIZER,
    "--name",
    "bad",
    "--json",
    "--quiet",
    "--workers",
    "1",
]

# (reason, raw line): one of each kind of bad record
BAD_LINES = [
    ("malformed_json", b'{"text": "an unterminated object'),
    ("invalid_utf8", b'{"text": "caf\xe9 latin-1, not UTF-8"}'),
    ("missing_field", b'{"content": "text under the wrong key"}'),
    ("non_string", b'{"text": 42}'),
    ("empty", b'{"text": "  \\n\\t  "}'),
    ("oversized", b'{"text": "' + b"x" * 70_000 + b'"}'),
]


def _mixed_file(path: Path) -> tuple[list[str], dict[str, int]]:
    """Good documents with one bad line of each kind in between; returns good texts, line of each bad."""
    good = sample_records(limit_bytes=40_000, max_doc=8_000)
    lines: list[bytes] = []
    where: dict[str, int] = {}
    for i, rec in enumerate(good):
        lines.append(json.dumps(rec).encode())
        if i < len(BAD_LINES):
            reason, raw = BAD_LINES[i]
            lines.append(raw)
            where[reason] = len(lines)  # 1-based line number
        if i == 2:
            lines.append(b"")  # a blank line is not a document and not an error
    write_jsonl(path, lines)
    return [r["text"] for r in good], where


def test_skip_counts_every_reason_and_names_file_and_line(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    good, where = _mixed_file(tmp_path / "in" / "mixed.jsonl")
    res = run_cli([*BASE, "-i", "in/mixed.jsonl", "--max-doc-bytes", "64KiB", "--task-size", "8KiB"], capsys)
    assert res.code == 0, res.stderr
    stats = res.json()["manifest"]["stats"]
    assert stats["errors"] == {reason: 1 for reason, _ in BAD_LINES}
    assert stats["docs_malformed"] == len(BAD_LINES)
    assert stats["docs_kept"] == len(good)
    assert stats["docs_read"] == len(good) + len(BAD_LINES)
    examples = {e["reason"]: e["where"] for e in stats["error_examples"]}
    path = str(tmp_path / "in" / "mixed.jsonl")
    for reason in ("malformed_json", "invalid_utf8", "missing_field", "non_string", "empty"):
        assert examples[reason] == f"{path}:{where[reason]}", reason
    assert dataset_documents(tmp_path / FINAL) == expected_ids(good)
    manifest = json.loads((tmp_path / FINAL / "manifest.json").read_text())
    assert manifest["stats"]["errors"]["oversized"] == 1


@pytest.mark.parametrize("reason", [r for r, _ in BAD_LINES])
def test_fail_names_file_and_line_and_leaves_nothing(
    tmp_path: Path, monkeypatch: Any, capsys: Any, reason: str
) -> None:
    monkeypatch.chdir(tmp_path)
    raw = dict(BAD_LINES)[reason]
    good = [json.dumps(r).encode() for r in sample_records(limit_bytes=6_000)]
    write_jsonl(tmp_path / "a.jsonl", [*good, raw, *good[:1]])
    res = run_cli([*BASE, "-i", "a.jsonl", "--on-error", "fail", "--max-doc-bytes", "64KiB"], capsys)
    assert res.code == 1
    assert f"a.jsonl:{len(good) + 1}: {reason.replace('_', ' ')}" in res.stderr
    assert res.stderr.startswith("error: ")
    assert not (tmp_path / FINAL).exists()
    assert not list((tmp_path / "storage").rglob("*storekit-tmp-*"))


def test_truncated_gzip_is_reported_once_and_good_lines_kept(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    records = sample_records(limit_bytes=120_000, max_doc=10_000)
    data = gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in records))
    cut = data[: len(data) * 2 // 3]
    (tmp_path / "cut.jsonl.gz").write_bytes(cut)
    # the task split is by (claimed) uncompressed size: the trailer is gone, so give the plan several tasks
    res = run_cli([*BASE, "-i", "cut.jsonl.gz", "--task-size", "8KiB"], capsys)
    assert res.code == 0, res.stderr
    stats = res.json()["manifest"]["stats"]
    assert stats["errors"] == {"truncated_input": 1}
    example = stats["error_examples"][0]
    assert example["where"].startswith(str(tmp_path / "cut.jsonl.gz") + ":")
    kept = dataset_documents(tmp_path / FINAL)
    assert 0 < len(kept) < len(records)
    assert kept == expected_ids([r["text"] for r in records[: len(kept)]])

    res = run_cli([*BASE, "-i", "cut.jsonl.gz", "--on-error", "fail", "--version", "v2"], capsys)
    assert res.code == 1 and "cut.jsonl.gz:" in res.stderr and "truncated" in res.stderr


def test_empty_input_glob(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    res = run_cli([*BASE, "-i", "nothing/*.jsonl"], capsys)
    assert res.code == 3
    assert "nothing/*.jsonl matched no files" in res.stderr
    assert not (tmp_path / "storage").exists()


def test_output_with_a_different_manifest_is_refused_unless_forced(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", sample_records(limit_bytes=5_000))
    write_jsonl(tmp_path / "b.jsonl", sample_records(limit_bytes=5_000, skip=30))
    assert run_cli([*BASE, "-i", "a.jsonl"], capsys).code == 0
    before = (tmp_path / FINAL / "manifest.json").read_bytes()
    res = run_cli([*BASE, "-i", "b.jsonl"], capsys)
    assert res.code == 1 and "already holds a different dataset" in res.stderr and "--force" in res.stderr
    assert (tmp_path / FINAL / "manifest.json").read_bytes() == before
    res = run_cli([*BASE, "-i", "b.jsonl", "--force"], capsys)
    assert res.code == 0
    texts = [r["text"] for r in sample_records(limit_bytes=5_000, skip=30)]
    assert dataset_documents(tmp_path / FINAL) == expected_ids(texts)


def test_output_that_is_not_a_dataset_is_refused(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", sample_records(limit_bytes=5_000))
    (tmp_path / FINAL).mkdir(parents=True)
    (tmp_path / FINAL / "notes.txt").write_text("someone's files")
    res = run_cli([*BASE, "-i", "a.jsonl"], capsys)
    assert res.code == 1 and "not a storekit dataset" in res.stderr
    assert (tmp_path / FINAL / "notes.txt").read_text() == "someone's files"


def test_parquet_without_the_text_column_names_file_and_columns(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.chdir(tmp_path)
    pq.write_table(pa.table({"body": ["a", "b"], "n": [1, 2]}), tmp_path / "x.parquet")
    res = run_cli([*BASE, "-i", "x.parquet"], capsys)
    assert res.code == 1
    assert "x.parquet: no column 'text' (columns: body, n)" in res.stderr and "--text-key" in res.stderr
    pq.write_table(pa.table({"text": ["fine", None, "also fine"]}), tmp_path / "y.parquet")
    doc = run_cli([*BASE, "-i", "y.parquet", "--version", "v2"], capsys).json()
    assert doc["manifest"]["stats"]["errors"] == {"missing_field": 1}
    assert doc["manifest"]["stats"]["error_examples"][0]["where"] == f"{tmp_path / 'y.parquet'} row 1"


def test_uncached_hub_tokenizer_fails_offline_with_a_clear_message(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    write_jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    res = run_cli([*BASE[:2], "-i", "a.jsonl", "--tokenizer", "some-org/some-model", "--name", "x"], capsys)
    assert res.code == 3
    assert "not in the Hugging Face cache" in res.stderr and "never downloads" in res.stderr


@pytest.mark.slow
def test_a_document_of_hundreds_of_megabytes_is_skipped_in_bounded_memory(tmp_path: Path) -> None:
    good = sample_records(limit_bytes=10_000, max_doc=5_000)[:2]
    with open(tmp_path / "huge.jsonl", "wb") as fh:
        fh.write(json.dumps(good[0]).encode() + b"\n")
        fh.write(b'{"text": "')
        block = b"0123456789abcdef" * 65536  # 1 MiB
        for _ in range(300):
            fh.write(block)
        fh.write(b'"}\n')
        fh.write(json.dumps(good[1]).encode() + b"\n")
    res = run_storekit([*BASE, "-i", "huge.jsonl"], cwd=tmp_path)
    assert res.code == 0, res.stderr
    doc = res.json()
    assert doc["manifest"]["stats"]["errors"] == {"oversized": 1}
    assert doc["manifest"]["stats"]["error_examples"][0]["where"] == f"{tmp_path / 'huge.jsonl'}:2"
    assert doc["timings"]["peak_rss_max_process_bytes"] < 400 << 20
    assert dataset_documents(tmp_path / FINAL) == expected_ids([good[0]["text"], good[1]["text"]])


# -- a full disk: a real small tmpfs -------------------------------------------------------------------
@pytest.fixture
def small_fs(tmp_path: Path) -> Any:
    mount = tmp_path / "small"
    mount.mkdir()

    def mount_with(size: str) -> Path:
        res = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True
        )
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({res.stderr.decode().strip()})")
        return mount

    yield mount_with
    if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)  # busy: detach, never leak it


def test_full_disk_is_refused_up_front(tmp_path: Path, small_fs: Any) -> None:
    fs = small_fs("1m")
    write_jsonl(tmp_path / "a.jsonl", sample_records(limit_bytes=3_000_000, max_doc=200_000))
    res = run_in_process([*BASE, "-i", str(tmp_path / "a.jsonl"), "--output", str(fs / "ds")], cwd=tmp_path)
    assert res.code == 6, res.stderr
    assert "not enough free space" in res.stderr
    assert list(fs.iterdir()) == []


@pytest.mark.parametrize("full", ["output", "work-dir"])
def test_full_disk_mid_way_fails_cleanly(
    tmp_path: Path, small_fs: Any, full: str, monkeypatch: Any, capsys: Any
) -> None:
    """The up-front check passes (its bound fits), then another writer fills the disk while the
    tasks run (work dir) or before the shards are written (output): exit 6, nothing half-written."""
    from storekit import faults

    rng = random.Random(7)
    alphabet = [chr(c) for c in range(0x4E00, 0x4E00 + 8000)] + [chr(c) for c in range(0x1F300, 0x1F5FF)]
    records = [{"text": "".join(rng.choice(alphabet) for _ in range(4000))} for _ in range(150)]
    write_jsonl(tmp_path / "a.jsonl", records)
    bound = (tmp_path / "a.jsonl").stat().st_size * 2 + (1 << 20)  # one uint16 token per byte at most
    if full == "output":  # work dir and output share the small file system
        fs = small_fs(str(2 * bound))
        where, step = ["--output", str(fs / "ds")], "prepare.tasks-done"
    else:  # task parts go to the small file system, the output elsewhere
        fs = small_fs(str(bound))
        where, step = ["--work-dir", str(fs), "--output", str(tmp_path / "ds")], "prepare.task-written"
    ballast = fs / "ballast"

    def another_writer_fills_the_disk() -> None:
        # once, whichever worker (thread or forked process) gets here first: the file is the flag
        try:
            fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return
        with os.fdopen(fd, "wb") as fh:
            st = os.statvfs(fs)
            os.posix_fallocate(fh.fileno(), 0, st.f_bavail * st.f_frsize - (64 << 10))

    monkeypatch.chdir(tmp_path)
    with faults.at(step, another_writer_fills_the_disk):
        res = run_cli([*BASE, "-i", "a.jsonl", *where, "--task-size", "256KiB", "--workers", "2"], capsys)
    assert ballast.exists()
    assert res.code == 6, res.stderr
    assert "no space left" in res.stderr
    assert not (fs / "ds").exists() and not (tmp_path / "ds").exists()
    leftovers = [p for p in [*fs.rglob("*"), *tmp_path.rglob("*")] if "storekit-tmp-" in p.name]
    assert leftovers == []
    shutil.rmtree(fs, ignore_errors=True)


@pytest.mark.parametrize("workers", ["2", "4"])  # two threads; two processes of two threads
def test_fail_from_a_worker_names_file_and_line(tmp_path: Path, workers: str) -> None:
    """--on-error fail with several workers: the worker's error reaches the user intact."""
    good = [json.dumps(r).encode() for r in sample_records(limit_bytes=60_000, max_doc=6_000)]
    write_jsonl(tmp_path / "a.jsonl", [*good, b'{"text": 7}', *good[:3]])
    args = [*BASE, "-i", "a.jsonl", "--on-error", "fail", "--workers", workers, "--task-size", "8KiB"]
    res = run_in_process(args, cwd=tmp_path)
    assert res.code == 1, res.stderr
    assert f"error: {tmp_path / 'a.jsonl'}:{len(good) + 1}: non string: 'text' is a int" in res.stderr
    assert json.loads(res.stdout)["error"]["exit_code"] == 1
    assert not (tmp_path / FINAL).exists()
    assert not [p for p in (tmp_path / "storage").rglob("*") if "storekit-tmp-" in p.name]


def test_a_gzip_cut_before_its_first_line_is_one_error_with_a_true_progress_total(tmp_path: Path) -> None:
    """101 bytes of a 2 MB .jsonl.gz: its last 4 bytes are no gzip trailer, so the size shown and the
    task split come from what decompresses (never "0 B/3.7 GiB"); nothing is kept, so nothing is
    committed and the one error line names the file (exit 1)."""
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta"]
    body = "".join(
        json.dumps({"text": " ".join(rng.choice(words) for _ in range(200))}) + "\n" for _ in range(2000)
    )
    packed = gzip.compress(body.encode())
    (tmp_path / "in.jsonl.gz").write_bytes(packed[:101])
    trailer = int.from_bytes(packed[97:101], "little")
    assert trailer > 101 * 1032  # the bytes the old code took for the uncompressed size
    ran = run_in_process(
        [
            "prepare",
            "dataset",
            "-i",
            "in.jsonl.gz",
            "--tokenizer",
            TOKENIZER,
            "--name",
            "cut",
            "--workers",
            "1",
        ],
        cwd=tmp_path,
    )
    assert ran.returncode == 1, ran.stderr
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"{tmp_path / 'in.jsonl.gz'}:1: compressed stream is truncated" in errors[0]
    progress = [line for line in ran.stderr.splitlines() if line.startswith("progress:")]
    assert progress and all(line.startswith("progress: tokenizing 1 task, ") for line in progress), progress
    totals = {line.split(", ")[2].split("/")[1] for line in progress}
    assert len(totals) == 1 and totals.pop().endswith(" B")  # bytes, not KiB/MiB/GiB of a made-up size
    assert not (tmp_path / "storage/datasets/text/cut/v1").exists()
    assert not list((tmp_path / "storage/datasets").rglob("manifest.json"))
