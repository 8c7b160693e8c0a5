"""The stub a unit leaves where it was: `<unit>.storekit-stub`, naming the tier and manifest it went to.

The stub holds no URL and no credentials: `to_tier` resolves through the site config, so a stub can be
read by anyone who may list the run. It is written atomically by the mover after the unit's copy is
committed, and removed last by a recall. `layout check`, `ckpt list` and `tier --recall` read it here.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import asdict, dataclass
from typing import Any

from storekit.errors import MismatchError

STUB_SUFFIX = ".storekit-stub"
ARCHIVE_SUFFIX = ".storekit-archive.json"  # the mover's manifest of a unit, beside it where it went
TIER_JOURNAL_DIR = ".storekit-tier-journal"  # the mover's unit journals, in a shared tier's root
STUB_KIND = "storekit-stub"
STUB_SCHEMA = 1
STUB_MAX_BYTES = 64 * 1024  # a stub is small; anything bigger is not one
UNIT_KINDS = ("checkpoint", "dataset")
ACTIONS = ("archive", "drain")
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")


class StubError(MismatchError):
    """A `*.storekit-stub` that cannot be read: names the file and the key (exit 4)."""


@dataclass(frozen=True, kw_only=True)
class Stub:
    unit: str  # the unit's name (last path component)
    unit_kind: str  # checkpoint | dataset
    is_file: bool
    writer: str | None
    step: int | None
    action: str  # archive | drain
    to_tier: str  # tier name in storekit.toml
    to_path: str  # the unit's path on that tier
    manifest: str  # the archive manifest's path on that tier
    manifest_xxh3: str  # xxh3-128 hex of the manifest's bytes
    bytes: int
    files: int
    dirs: int  # directories of the unit, its root included (0 for a unit that is one file)
    unit_id: str  # the mover's journal id (16 hex): action-log lines carry it
    at: str  # ISO 8601 UTC of the commit

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": STUB_SCHEMA, "kind": STUB_KIND, **asdict(self)}

    @property
    def done_verb(self) -> str:
        return {"archive": "archived", "drain": "drained"}[self.action]


def is_stub_name(name: str) -> bool:
    return name.endswith(STUB_SUFFIX) and len(name) > len(STUB_SUFFIX)


def stub_rel(unit_rel: str) -> str:
    """Where the stub of the unit at `unit_rel` lives: beside it, named after it."""
    return unit_rel.rstrip("/") + STUB_SUFFIX


def unit_rel_of(stub_path: str) -> str:
    """The unit path a stub stands for (`run_001/step_5.storekit-stub` -> `run_001/step_5`)."""
    if not is_stub_name(posixpath.basename(stub_path)):
        raise ValueError(f"{stub_path} is not a stub name")
    return stub_path[: -len(STUB_SUFFIX)]


def render_stub(stub: Stub) -> bytes:
    _validate(stub.to_dict(), "<stub>")
    return (json.dumps(stub.to_dict(), indent=1, sort_keys=True) + "\n").encode("utf-8")


def parse_stub(data: bytes, source: str) -> Stub:
    """A stub's bytes as a `Stub`; anything else is a one-line StubError naming `source` and the key."""
    if len(data) > STUB_MAX_BYTES:
        raise StubError(f"{source}: not a storekit stub ({len(data)} bytes; a stub is under 64 KiB)")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StubError(f"{source}: not a storekit stub (not JSON: {exc})") from None
    if not isinstance(doc, dict):
        raise StubError(f"{source}: not a storekit stub (expected a JSON object)")
    _validate(doc, source)
    return Stub(**{k: doc[k] for k in _FIELDS})


_FIELDS: dict[str, tuple[type, ...]] = {
    "unit": (str,),
    "unit_kind": (str,),
    "is_file": (bool,),
    "writer": (str, type(None)),
    "step": (int, type(None)),
    "action": (str,),
    "to_tier": (str,),
    "to_path": (str,),
    "manifest": (str,),
    "manifest_xxh3": (str,),
    "bytes": (int,),
    "files": (int,),
    "dirs": (int,),
    "unit_id": (str,),
    "at": (str,),
}


def _validate(doc: dict[str, Any], source: str) -> None:
    if doc.get("kind") != STUB_KIND:
        raise StubError(f"{source}: kind: expected {STUB_KIND!r}, got {doc.get('kind')!r}")
    if doc.get("schema_version") != STUB_SCHEMA:
        raise StubError(
            f"{source}: schema_version: {doc.get('schema_version')!r} is not {STUB_SCHEMA}",
            hint="a newer storekit wrote it; upgrade storekit",
        )
    for key, types in _FIELDS.items():
        if key not in doc:
            raise StubError(f"{source}: {key}: missing")
        value = doc[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise StubError(f"{source}: {key}: unexpected value {value!r}")
    unknown = sorted(set(doc) - set(_FIELDS) - {"kind", "schema_version"})
    if unknown:
        raise StubError(f"{source}: {unknown[0]}: unknown key")
    if doc["unit_kind"] not in UNIT_KINDS:
        raise StubError(f"{source}: unit_kind: expected one of {', '.join(UNIT_KINDS)}")
    if doc["action"] not in ACTIONS:
        raise StubError(f"{source}: action: expected one of {', '.join(ACTIONS)}")
    if not _HEX32.match(doc["manifest_xxh3"]):
        raise StubError(f"{source}: manifest_xxh3: expected 32 lowercase hex digits (xxh3-128)")
    for key in ("to_path", "manifest"):
        path = doc[key]
        if not path or path.startswith("/") or ".." in path.split("/") or "://" in path:
            raise StubError(f"{source}: {key}: {path!r} is not a path relative to the tier root")
    for key in ("bytes", "files", "dirs"):
        if doc[key] < 0:
            raise StubError(f"{source}: {key}: negative")
    if not _HEX16.match(doc["unit_id"]):
        raise StubError(f"{source}: unit_id: expected 16 lowercase hex digits (the mover's journal id)")
    if "/" in doc["unit"] or not doc["unit"]:
        raise StubError(f"{source}: unit: {doc['unit']!r} is not one path component")
