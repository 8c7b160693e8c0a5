"""One durable record design (storekit/records.py) for the unit journal, the upload journal and a
job's header: versioned JSON replaced whole, host/pid, one error naming a damaged file (exit 4)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from storekit.errors import ExitCode
from storekit.jobdir import JobDir
from storekit.ops.journal import FileUploadJournal
from storekit.records import DamagedRecord, RecordFile
from storekit.tier.unitjournal import UnitJournal


def test_written_whole_versioned_and_naming_its_run(tmp_path: Path) -> None:
    record = RecordFile(tmp_path / "r.json", "test record", 3)
    assert record.read() is None
    record.write({"a": 1})
    record.write({"a": 2, "host": "node7"})  # a journal keeps the host that started it
    doc = json.loads((tmp_path / "r.json").read_bytes())
    assert doc == {"a": 2, "version": 3, "host": "node7", "pid": os.getpid()}
    assert record.read() == doc
    assert os.listdir(tmp_path) == ["r.json"]  # no temp left
    assert (os.stat(tmp_path / "r.json").st_mode & 0o777) == 0o600


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b'{"version": 2}', "version 2, expected 3"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"version": 3', "not JSON"),
        (b"", "not JSON"),
    ],
)
def test_a_damaged_record_is_one_error_naming_the_file(tmp_path: Path, content: bytes, why: str) -> None:
    (tmp_path / "r.json").write_bytes(content)
    with pytest.raises(DamagedRecord) as info:
        RecordFile(tmp_path / "r.json", "test record", 3).read()
    assert info.value.message.startswith(f"{tmp_path / 'r.json'}: damaged test record (")
    assert why in info.value.message and info.value.exit_code == ExitCode.MISMATCH


def test_every_journal_and_the_job_header_share_it(tmp_path: Path) -> None:
    """The same bad bytes give the same error from each of the three readers."""
    unit = UnitJournal(tmp_path, "abc")
    unit.advance("planned", source="/x")
    uploads = FileUploadJournal(tmp_path / "abc.uploads.json")
    uploads.forget("b", "k")  # nothing to forget: nothing written
    work = JobDir(tmp_path / "job")
    work.create()
    work.write_plan(b"{}", kind="k", tasks=1)
    doc = json.loads(unit.path.read_bytes())
    assert doc["host"] == socket.gethostname() and doc["pid"] == os.getpid() and doc["version"] == 1
    assert work.header().kind == "k"  # host/pid in job.json do not reach JobHeader
    for path, read, what in (
        (unit.path, lambda: UnitJournal(tmp_path, "abc").load(), "unit journal"),
        (uploads.path, uploads.entries, "upload journal"),
        (work.header_file, work.header, "job record"),
    ):
        Path(path).write_bytes(b"{torn")
        with pytest.raises(DamagedRecord, match=rf"^{Path(path)}: damaged {what} \(not JSON"):
            read()
