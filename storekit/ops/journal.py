"""The record of multipart uploads in progress, written before their first part is sent.

A multipart upload that is never completed or aborted keeps its parts (and their space) on the
gateway forever, invisible to listings. The engine records every upload here before the first part
goes out, and forgets it only once the object is complete (or the upload aborted), so a killed run
either resumes exactly those uploads or aborts exactly those, never a whole bucket's.
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from storekit.records import RecordFile


@dataclass(frozen=True, kw_only=True)
class UploadEntry:
    bucket: str
    key: str
    upload_id: str | None  # None: create_multipart_upload was sent, its answer not yet recorded
    part_size: int
    # the source as it was when the upload began: a resume reuses parts only if it is unchanged
    size: int
    mtime_ns: int
    inode: int
    started: float  # wall-clock time the entry was first written (bounds an abort by key)


class UploadJournal(Protocol):
    def record(self, entry: UploadEntry) -> None:
        """Durably note `entry` (replacing the one for the same bucket and key)."""

    def forget(self, bucket: str, key: str) -> None: ...

    def entries(self) -> list[UploadEntry]: ...


class FileUploadJournal:
    """An UploadJournal in one durable record (storekit.records): every change is an atomic replace
    plus a directory fsync; a damaged file is DamagedRecord (exit 4) naming it."""

    VERSION = 1

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._record = RecordFile(Path(os.path.abspath(self.path)), "upload journal", self.VERSION)
        self._lock = threading.Lock()

    def _load(self) -> dict[str, dict[str, object]]:
        doc = self._record.read()
        uploads = {} if doc is None else doc.get("uploads", {})
        if not isinstance(uploads, dict):
            raise self._record.damaged("its uploads are not a JSON object")
        return uploads

    def _store(self, uploads: dict[str, dict[str, object]]) -> None:
        self._record.write({"uploads": uploads})

    def record(self, entry: UploadEntry) -> None:
        with self._lock:
            uploads = self._load()
            uploads[f"{entry.bucket}/{entry.key}"] = asdict(entry)
            self._store(uploads)

    def forget(self, bucket: str, key: str) -> None:
        with self._lock:
            uploads = self._load()
            if uploads.pop(f"{bucket}/{key}", None) is not None:
                self._store(uploads)

    def entries(self) -> list[UploadEntry]:
        with self._lock:
            return [UploadEntry(**v) for _, v in sorted(self._load().items())]  # type: ignore[arg-type]
