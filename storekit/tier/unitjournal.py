"""The per-unit journal: which step of a move a unit has durably reached, and the action log.

One JSON file per unit in the journal directory (a shared tier: every node sees every unit):

    planned -> copying -> copied -> verified -> committed -> stubbed -> freed (file removed)

Each step is written with an atomic replace plus a directory fsync *after* the work it names is
durable (a storekit.records.RecordFile, as every journal and job record is), so a rerun resumes
from the last step that surely happened. The copy's manifest (digests
from the reading pass) is kept beside it once copied. Multipart uploads in flight are journaled in
`<id>.uploads.json` (storekit.ops.journal) so `tier gc` aborts exactly those. `actions.log` gets
one JSON line per action (fsynced, append-only): what, unit, bytes, digests.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import xxhash

from storekit import faults
from storekit.durable import TMP_MARK, fsync_dir, write_file_atomic
from storekit.errors import MismatchError
from storekit.records import RecordFile

STATES = ("planned", "copying", "copied", "verified", "committed", "stubbed", "freed")
JOURNAL_VERSION = 1
LOG_NAME = "actions.log"


def unit_id(action: str, source: str, dest: str) -> str:
    """Stable per (action, source unit, destination): a rerun finds its own journal."""
    return xxhash.xxh3_64_hexdigest(f"{action}\0{source}\0{dest}".encode())


def state_index(state: str) -> int:
    return STATES.index(state)


class UnitJournal:
    def __init__(self, journal_dir: Path, uid: str) -> None:
        self.dir = journal_dir
        self.id = uid
        self.path = journal_dir / f"{uid}.json"
        self.manifest_path = journal_dir / f"{uid}.manifest.json"
        self.uploads_path = journal_dir / f"{uid}.uploads.json"
        self.record = RecordFile(self.path, "unit journal", JOURNAL_VERSION, hint="see `tier gc`")
        self.doc: dict[str, Any] = {}

    def load(self, *, tidy: bool = True) -> bool:
        """Read the journal (under the unit's lease); False when there is none (a first run).
        `tidy` removes the temps a killed write left (never on a dry run: it writes nothing)."""
        if tidy:
            self.purge_temps()
        doc = self.record.read()
        if doc is None:
            if tidy:
                self.remove_orphans()
            return False
        if doc.get("state") not in STATES:
            raise self.record.damaged(f"unknown state {doc.get('state')!r}")
        self.doc = doc
        return True

    def purge_temps(self) -> None:
        """Temp files of this journal's atomic writes that a kill left (only its lease holder or
        `tier gc` of an abandoned move calls this: nobody else writes them)."""
        prefix = f".{self.id}."
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self.dir):
                if name.startswith(prefix) and TMP_MARK in name:
                    with contextlib.suppress(FileNotFoundError):
                        (self.dir / name).unlink()

    @property
    def state(self) -> str:
        return str(self.doc.get("state", ""))

    def reached(self, state: str) -> bool:
        return bool(self.doc) and state_index(self.state) >= state_index(state)

    def advance(self, state: str, **fields: Any) -> None:
        """Durably record that `state` was reached (and any fields that go with it)."""
        self.doc.update(fields, id=self.id, state=state, updated=time.time())
        self.dir.mkdir(parents=True, exist_ok=True)
        self.record.write(self.doc)  # keeps the first writer's host: a node-local unit is only there
        faults.point(f"tier.{state}")

    def save_manifest(self, data: bytes) -> None:
        write_file_atomic(self.manifest_path, data, mode=0o600)
        fsync_dir(self.dir)

    def saved_manifest(self) -> bytes | None:
        try:
            return self.manifest_path.read_bytes()
        except FileNotFoundError:
            return None

    def finish(self) -> None:
        """The move is done (or rolled back): the journal goes; the action log keeps the history.
        The journal itself first: a kill after it leaves files no journal names (removed by the next
        load of this id or by `journals`), never a journal whose saved manifest is gone."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        fsync_dir(self.dir)
        self.remove_orphans()

    def remove_orphans(self) -> None:
        """The saved manifest and upload journal of a finished move (nothing reads them any more)."""
        for path in (self.manifest_path, self.uploads_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _is_journal_name(name: str) -> bool:
    """`<id>.json`: a unit journal (its saved manifest and upload journal have two dots)."""
    return name.endswith(".json") and name.count(".") == 1


def journals(journal_dir: Path, *, tidy: bool = True, damaged: list[str] | None = None) -> list[UnitJournal]:
    """Every unit journal left in `journal_dir` (moves not finished). A journal that cannot be read
    raises, or with `damaged` given is listed there ("<path>: why") and skipped: one bad file must
    not stop every other move's way forward."""
    found = []
    with contextlib.suppress(FileNotFoundError):
        names = sorted(os.listdir(journal_dir))
        ids = {n.split(".")[0] for n in names if _is_journal_name(n)}
        for name in names:
            uid = name.split(".")[0]
            if _is_journal_name(name) and not name.startswith("."):
                j = UnitJournal(journal_dir, uid)
                try:
                    loaded = j.load(tidy=tidy)
                except MismatchError as exc:
                    if damaged is None:
                        raise
                    damaged.append(exc.message)
                    continue
                if loaded:
                    found.append(j)
            elif tidy and name.endswith((".manifest.json", ".uploads.json")) and uid not in ids:
                UnitJournal(journal_dir, uid).remove_orphans()  # a kill inside finish()
    return found


def log_action(journal_dir: Path, action: str, unit_id_: str, **fields: Any) -> None:
    """Append one line to the action log and fsync it (O_APPEND: lines from many nodes interleave whole)."""
    journal_dir.mkdir(parents=True, exist_ok=True)
    doc = {"time": time.time(), "host": socket.gethostname(), "pid": os.getpid(), "action": action}
    doc.update(unit_id=unit_id_, **fields)
    line = json.dumps(doc, sort_keys=True).encode() + b"\n"
    fd = os.open(journal_dir / LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_log(journal_dir: Path) -> list[dict[str, Any]]:
    """The action log's lines (a torn last line from a crash is skipped)."""
    out = []
    with contextlib.suppress(FileNotFoundError), open(journal_dir / LOG_NAME, "rb") as fh:
        for line in fh:
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out
