"""Durable records: one JSON document per file, replaced whole, versioned, naming who wrote it.

The tier's unit journal (tier/unitjournal.py), the multipart upload journal (ops/journal.py) and a
job's records (jobdir.py: job.json, failed/NNNNNN.json) are all one shape: a JSON object that
readers see whole (sibling temp, fsync, rename: durable.write_file_atomic), with a version field,
the host and pid of the run that made it, and, for the journals a crash is resumed from, the rename made
durable (directory fsync) before the caller goes on. A record that cannot be read, is not JSON, or
is not of the expected version is one error naming the file (DamagedRecord, exit 4): a reader
never guesses at a half-understood record. The action log beside the unit journals is a different
shape (append-only lines, storekit.tier.unitjournal.log_action).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storekit.durable import fsync_dir, write_file_atomic
from storekit.errors import MismatchError


class DamagedRecord(MismatchError):
    """A record file that exists but is not a readable record of its kind and version (exit 4)."""


@dataclass(frozen=True)
class RecordFile:
    path: Path
    what: str  # how errors name it: "unit journal", "upload journal", "job record"
    version: int
    version_key: str = "version"
    hint: str | None = None  # what to do about a damaged one

    def read(self) -> dict[str, Any] | None:
        """The record, or None when there is none; DamagedRecord for anything else."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self.damaged(exc.strerror or str(exc)) from None
        return self.parse(data)

    def parse(self, data: bytes) -> dict[str, Any]:
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise self.damaged(f"not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise self.damaged("not a JSON object")
        if doc.get(self.version_key) != self.version:
            raise self.damaged(f"{self.version_key} {doc.get(self.version_key)!r}, expected {self.version}")
        return doc

    def damaged(self, why: str) -> DamagedRecord:
        return DamagedRecord(f"{self.path}: damaged {self.what} ({why})", hint=self.hint)

    def write(self, doc: dict[str, Any], *, sync_dir: bool = True) -> None:
        """`doc` (its version set; `host` and `pid` this process's unless it names them: a journal
        keeps the run that started it, a node-local unit is only on that host) replaces the record
        whole; with `sync_dir` the rename is durable before this returns (what a rerun resumes
        from must not go back to an older state after a crash)."""
        doc[self.version_key] = self.version
        doc.setdefault("host", socket.gethostname())
        doc.setdefault("pid", os.getpid())
        data = json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"
        write_file_atomic(self.path, data, mode=0o600)
        if sync_dir:
            fsync_dir(self.path.parent)
