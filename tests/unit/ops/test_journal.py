"""The upload journal: durable, atomic, one entry per bucket/key."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from storekit.ops.journal import FileUploadJournal, UploadEntry
from storekit.records import DamagedRecord


def _entry(key: str, upload_id: str | None) -> UploadEntry:
    return UploadEntry(
        bucket="b", key=key, upload_id=upload_id, part_size=5, size=10, mtime_ns=1, inode=2, started=3.0
    )


def test_record_replace_forget(tmp_path: Path) -> None:
    path = tmp_path / "uploads.json"
    journal = FileUploadJournal(path)
    assert journal.entries() == []
    journal.record(_entry("k1", None))  # the intent, before create_multipart_upload
    journal.record(_entry("k1", "id-1"))  # replaced by the answer
    journal.record(_entry("k2", "id-2"))
    assert FileUploadJournal(path).entries() == [_entry("k1", "id-1"), _entry("k2", "id-2")]
    journal.forget("b", "k1")
    journal.forget("b", "never-there")
    assert FileUploadJournal(path).entries() == [_entry("k2", "id-2")]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["uploads.json"]  # no temp file left behind


def test_a_foreign_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "uploads.json"
    path.write_text('{"version": 99}')
    with pytest.raises(
        DamagedRecord, match=r"uploads\.json: damaged upload journal \(version 99, expected 1\)"
    ):
        FileUploadJournal(path).entries()
