"""The stub a moved unit leaves beside its old place: where it went and its manifest's digest.

`runs/r1/step_100` archived leaves the file `runs/r1/step_100.storekit-stub` (JSON, written
atomically before the source is freed). `layout check` and `ckpt list` read it; `recall` follows it.
"""

from __future__ import annotations

import builtins
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from storekit.durable import fsync_dir, write_file_atomic
from storekit.errors import MismatchError

STUB_SUFFIX = ".storekit-stub"
STUB_KIND = "storekit-stub"
STUB_VERSION = 1


class StubError(MismatchError):
    """A stub that cannot be read as one (damaged, edited, another version): exit 4."""


@dataclass(frozen=True, kw_only=True)
class Stub:
    unit: str  # the unit's name (last path component)
    action: str  # "archive" | "drain"
    tier: str  # the destination tier's name ("" when it was given as a bare URL or path)
    url: str  # where the unit's files are: s3://bucket/prefix/run/step_100 or file:///...
    manifest: str  # where its archive manifest is (present = the copy is complete)
    manifest_xxh3_128: str
    files: int
    bytes: int
    dirs: int
    moved_at: float
    unit_id: str  # the unit journal's id (its action log lines carry it)

    def to_json(self) -> builtins.bytes:
        doc = {"kind": STUB_KIND, "version": STUB_VERSION, **asdict(self)}
        return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"


def stub_path(unit_path: str | os.PathLike[str]) -> Path:
    path = Path(unit_path)
    return path.parent / f"{path.name}{STUB_SUFFIX}"


def is_stub_name(name: str) -> bool:
    return name.endswith(STUB_SUFFIX) and not name.startswith(".")


def unit_name_of_stub(name: str) -> str:
    return name[: -len(STUB_SUFFIX)]


def write_stub(unit_path: str | os.PathLike[str], stub: Stub) -> Path:
    path = stub_path(unit_path)
    write_file_atomic(path, stub.to_json(), mode=0o644)
    fsync_dir(path.parent)
    return path


def read_stub(path: str | os.PathLike[str]) -> Stub | None:
    """The stub at `path` (None when there is none); StubError (exit 4) when it is not a valid one."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(data)
        if doc.get("kind") != STUB_KIND or doc.get("version") != STUB_VERSION:
            raise ValueError(f"not a {STUB_KIND} of version {STUB_VERSION}")
        return Stub(
            unit=str(doc["unit"]),
            action=str(doc["action"]),
            tier=str(doc["tier"]),
            url=str(doc["url"]),
            manifest=str(doc["manifest"]),
            manifest_xxh3_128=str(doc["manifest_xxh3_128"]),
            files=int(doc["files"]),
            bytes=int(doc["bytes"]),
            dirs=int(doc["dirs"]),
            moved_at=float(doc["moved_at"]),
            unit_id=str(doc["unit_id"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StubError(f"{path}: not a valid storekit stub ({exc})") from None
