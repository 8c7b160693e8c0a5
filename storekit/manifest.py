"""The one manifest module: datasets, checkpoints and tier units, one parse, one schema check.

A manifest lists files with sizes and xxh3-128 digests plus kind-specific fields. It is written last
and atomically: whatever it names is complete, and a directory without it is not committed.

Two on-disk shapes are read, both through `parse_manifest` (one JSON/depth/schema check):

- `manifest.json` of a dataset or a checkpoint: `schema_version`, `kind`, `storekit_version`, the
  kind's own fields, then `files` (path, size, xxh3_128);
- a tier unit's archive manifest (`<unit>.storekit-archive.json` beside its copy): kind
  `storekit-archive-manifest` with its version under `version`, every entry of the unit (files,
  directories, symlinks with mode, mtime_ns, owner) under `entries`. Stubs and journals hold the
  xxh3-128 of these exact bytes, so the shape is kept as written; `UnitManifest` is its typed view.

Imports neither fsspec nor the store, config or ops packages (`.importlinter` forbids it):
`storekit.checkpoint.commit`, which training scripts import, writes its manifests with this module.
The helpers that read, write and verify through a tier take any `ManifestStore` (storekit.store's
stores are).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import IO, Any, Protocol

import xxhash

from storekit import __version__
from storekit.digest import FileDigest, hash_stream
from storekit.errors import (
    InputError,
    MismatchError,
    NotFoundError,
    NotRegularFileError,
    PathEscapeError,
    StorekitError,
)
from storekit.paths import clean_rel, join_rel

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = 1
MAX_DEPTH = 64  # storekit's own manifests nest about 5 deep; a deeper one is not ours (a recursion bomb)

# a tier unit's archive manifest: its own kind, its version under "version" (see the docstring)
UNIT_MANIFEST_SUFFIX = ".storekit-archive.json"
UNIT_MANIFEST_KIND = "storekit-archive-manifest"
UNIT_MANIFEST_VERSION = 1
FILE, DIR, LINK = "file", "dir", "symlink"

# kind -> (the key its version is under, the versions this storekit reads); any other kind: schema_version
_VERSIONS: dict[str, tuple[str, tuple[int, ...]]] = {
    UNIT_MANIFEST_KIND: ("version", (UNIT_MANIFEST_VERSION,)),
}
_DEFAULT_VERSION = ("schema_version", (MANIFEST_SCHEMA,))


@dataclass(frozen=True)
class ManifestFile:
    path: str  # relative to the manifest's directory
    size: int
    xxh3_128: str

    def digest(self) -> FileDigest:
        return FileDigest(size=self.size, xxh3_128=self.xxh3_128)


@dataclass(frozen=True, kw_only=True)
class Manifest:
    kind: str  # "dataset", "checkpoint", UNIT_MANIFEST_KIND
    files: tuple[ManifestFile, ...]
    body: dict[str, Any] = field(default_factory=dict)  # kind-specific fields
    storekit_version: str = __version__

    def to_json(self) -> bytes:
        if self.kind == UNIT_MANIFEST_KIND:
            raise ValueError("a tier unit's manifest is written by UnitManifest.to_json")
        doc = {
            "schema_version": MANIFEST_SCHEMA,
            "kind": self.kind,
            "storekit_version": self.storekit_version,
            **self.body,
            "files": [{"path": f.path, "size": f.size, "xxh3_128": f.xxh3_128} for f in self.files],
        }
        return json.dumps(doc, indent=2, sort_keys=False).encode("utf-8") + b"\n"

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def manifest_digest(data: bytes) -> str:
    """The xxh3-128 of a manifest's bytes (what a stub and a journal record of a unit's manifest)."""
    return xxhash.xxh3_128_hexdigest(data)


def parse_manifest(
    data: bytes, *, source: str, kind: str | None = None, error: type[StorekitError] = InputError
) -> Manifest:
    """Any manifest storekit writes, checked (JSON, depth, keys, schema version, paths).

    `kind`: the one kind expected here; `error`: what a damaged manifest raises (InputError, exit 3,
    for one given by hand; MismatchError, exit 4, for one read back from a copy)."""
    what = "storekit archive manifest" if kind == UNIT_MANIFEST_KIND else "manifest"

    def bad(why: str) -> StorekitError:
        return error(f"{source}: not a valid {what} ({why})")

    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad(f"JSON error: {exc}") from None
    except RecursionError:
        doc = None  # nested past Python's limit: caught by the depth check below
    if doc is None or _depth(doc) > MAX_DEPTH:
        raise bad(f"nested deeper than {MAX_DEPTH} levels")
    if not isinstance(doc, dict):
        raise bad("expected a JSON object")
    if "kind" not in doc:
        raise bad("missing key 'kind'")
    found = str(doc["kind"])
    if kind is not None and found != kind:
        raise bad(f"kind {found!r}, expected {kind!r}")
    key, readable = _VERSIONS.get(found, _DEFAULT_VERSION)
    for required in (key, "entries" if found == UNIT_MANIFEST_KIND else "files"):
        if required not in doc:
            raise bad(f"missing key {required!r}")
    if type(doc[key]) is not int or doc[key] not in readable:
        raise error(
            f"{source}: {key} {doc[key]!r} is not one this storekit reads ({', '.join(map(str, readable))})"
        )
    if found == UNIT_MANIFEST_KIND:
        return _unit_manifest(doc, bad)
    if not isinstance(doc["files"], list):
        raise bad("files is not a list")
    files = []
    for i, f in enumerate(doc["files"]):
        try:
            files.append(
                ManifestFile(path=clean_rel(f["path"]), size=int(f["size"]), xxh3_128=str(f["xxh3_128"]))
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise error(f"{source}: files[{i}] is malformed ({exc})") from None
        except PathEscapeError as exc:
            raise error(f"{source}: files[{i}] names a path outside its directory ({exc})") from None
    body = {k: v for k, v in doc.items() if k not in ("schema_version", "kind", "files", "storekit_version")}
    return Manifest(
        kind=found,
        files=tuple(files),
        body=body,
        storekit_version=str(doc.get("storekit_version", "?")),
    )


def _depth(doc: Any) -> int:
    """How deep lists and objects nest in `doc`, without recursion (stops past MAX_DEPTH)."""
    deepest, todo = 0, [(doc, 1)]
    while todo:
        node, level = todo.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            todo.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


# -- datasets and checkpoints on a store ------------------------------------------------------------
class ManifestStore(Protocol):
    """What the helpers below use of a storekit.store.Store (named here, never imported)."""

    @property
    def display_url(self) -> str: ...

    def read_bytes(self, rel: str) -> bytes: ...

    def write_bytes(self, rel: str, data: bytes) -> None: ...

    def open_read(self, rel: str) -> IO[bytes]: ...


def read_manifest(store: ManifestStore, directory: str) -> Manifest:
    rel = join_rel(directory, MANIFEST_NAME)
    try:
        data = store.read_bytes(rel)
    except NotFoundError:
        raise NotFoundError(
            f"{store.display_url}/{directory}: no {MANIFEST_NAME} (not a committed dataset/checkpoint)"
        ) from None
    return parse_manifest(data, source=f"{store.display_url}/{rel}")


def write_manifest(store: ManifestStore, directory: str, manifest: Manifest) -> None:
    """Atomic: temp + rename on POSIX, a single PUT on S3. Call only after every file is in place."""
    store.write_bytes(join_rel(directory, MANIFEST_NAME), manifest.to_json())


@dataclass(frozen=True)
class VerifyProblem:
    path: str
    problem: str


def file_problem(want: ManifestFile, got: FileDigest) -> str | None:
    """How a file read back differs from its manifest line (None: the same size and bytes)."""
    if got.size != want.size:
        return f"size {got.size} != manifest {want.size}"
    if got.xxh3_128 != want.xxh3_128:
        return f"xxh3-128 {got.xxh3_128} != manifest {want.xxh3_128}"
    return None


def verify_manifest(store: ManifestStore, directory: str, manifest: Manifest) -> list[VerifyProblem]:
    """Re-hash every file the manifest names; return what is missing or different."""
    problems = []
    for f in manifest.files:
        try:
            with store.open_read(join_rel(directory, f.path)) as fh:
                got = hash_stream(fh.read)
        except NotFoundError:
            problems.append(VerifyProblem(f.path, "missing"))
            continue
        except PathEscapeError:
            problems.append(VerifyProblem(f.path, "a symlink that leaves the tier"))
            continue
        except NotRegularFileError as exc:  # a FIFO, a device, a directory: never read
            problems.append(VerifyProblem(f.path, exc.message.rpartition(": ")[2]))
            continue
        problem = file_problem(f, got)
        if problem is not None:
            problems.append(VerifyProblem(f.path, problem))
    return problems


def require_verified(store: ManifestStore, directory: str, manifest: Manifest) -> None:
    problems = verify_manifest(store, directory, manifest)
    if problems:
        first = problems[0]
        raise MismatchError(
            f"{store.display_url}/{directory}: {len(problems)} file(s) differ from the manifest; "
            f"first: {first.path}: {first.problem}"
        )


# -- tier units -------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class UnitEntry:
    """One entry of a tier unit (storekit.tier.unitwalk reads them from a tree)."""

    path: str  # relative to the unit root, '/'-separated; "." is the unit directory itself
    type: str  # FILE | DIR | LINK
    mode: int  # permission bits (stat.S_IMODE)
    mtime_ns: int
    size: int = 0
    xxh3_128: str = ""  # files only, filled in from the copy's reading pass
    target: str = ""  # symlinks only
    uid: int = -1  # owner and group (-1: not recorded, a manifest made before they were)
    gid: int = -1
    # fingerprint only (not in the manifest): a change of either means the file was touched
    ctime_ns: int = 0
    inode: int = 0

    def fingerprint(self) -> tuple[str, str, int, int, int, int]:
        return (self.path, self.type, self.size, self.mtime_ns, self.ctime_ns, self.inode)

    def manifest_dict(self) -> dict[str, object]:
        doc = asdict(self)
        for key in ("ctime_ns", "inode"):
            doc.pop(key)
        if self.type != FILE:
            doc.pop("size")
            doc.pop("xxh3_128")
        if self.type != LINK:
            doc.pop("target")
        for key in ("uid", "gid"):
            if doc[key] < 0:
                doc.pop(key)
        return doc


@dataclass(frozen=True, kw_only=True)
class UnitManifest:
    """A tier unit exactly: every file (size, xxh3-128, mode, mtime_ns, uid, gid), link and directory.

    Built from the digests computed while the source was read, stored beside the copy last
    (present = complete): the truth a recall and `tier verify` check against."""

    unit: str  # the unit's path relative to its tier root
    source: str  # where it was copied from (a URL without credentials)
    entries: list[UnitEntry]

    @property
    def files(self) -> list[UnitEntry]:
        return [e for e in self.entries if e.type == FILE]

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.files)

    @property
    def dirs(self) -> int:
        return sum(1 for e in self.entries if e.type == DIR)

    def to_json(self) -> bytes:
        doc = {
            "kind": UNIT_MANIFEST_KIND,
            "version": UNIT_MANIFEST_VERSION,
            "unit": self.unit,
            "source": self.source,
            "files": len(self.files),
            "bytes": self.total_bytes,
            "entries": [e.manifest_dict() for e in self.entries],
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"


def parse_unit_manifest(data: bytes, where: str) -> UnitManifest:
    """A unit's manifest read back from a tier; MismatchError (exit 4) naming `where` when damaged."""
    manifest = parse_manifest(data, source=where, kind=UNIT_MANIFEST_KIND, error=MismatchError)
    return UnitManifest(
        unit=manifest.body["unit"], source=manifest.body["source"], entries=manifest.body["entries"]
    )


def _unit_manifest(doc: dict[str, Any], bad: Callable[[str], StorekitError]) -> Manifest:
    """A unit manifest's document as a Manifest: its files, and the whole tree in body['entries']."""
    try:
        entries = [_unit_entry(raw) for raw in doc["entries"]]
        unit, source = str(doc["unit"]), str(doc["source"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise bad(str(exc)) from None
    files = tuple(ManifestFile(e.path, e.size, e.xxh3_128) for e in entries if e.type == FILE)
    return Manifest(
        kind=UNIT_MANIFEST_KIND, files=files, body={"unit": unit, "source": source, "entries": entries}
    )


def _unit_entry(raw: dict[str, Any]) -> UnitEntry:
    kind = str(raw["type"])
    if kind not in (FILE, DIR, LINK):
        raise ValueError(f"unknown entry type {kind!r}")
    path = str(raw["path"])
    if path != "." and (path.startswith("/") or ".." in path.split("/") or "" in path.split("/")):
        raise ValueError(f"entry path {path!r} leaves the unit")
    return UnitEntry(
        path=path,
        type=kind,
        mode=int(raw["mode"]),
        mtime_ns=int(raw["mtime_ns"]),
        size=int(raw.get("size", 0)),
        xxh3_128=str(raw.get("xxh3_128", "")),
        target=str(raw.get("target", "")),
        uid=int(raw.get("uid", -1)),
        gid=int(raw.get("gid", -1)),
    )
