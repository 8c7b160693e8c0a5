"""The one manifest format for datasets, checkpoints and archives.

A manifest lists files with sizes and xxh3-128 digests plus kind-specific fields. It is written last
and atomically: whatever it names is complete, and a directory without it is not committed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from storekit import __version__
from storekit.errors import InputError, MismatchError, NotFoundError, NotRegularFileError, PathEscapeError
from storekit.ops import FileDigest, hash_file
from storekit.paths import clean_rel, join_rel
from storekit.store import Store

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = 1


@dataclass(frozen=True)
class ManifestFile:
    path: str  # relative to the manifest's directory
    size: int
    xxh3_128: str

    def digest(self) -> FileDigest:
        return FileDigest(size=self.size, xxh3_128=self.xxh3_128)


@dataclass(frozen=True, kw_only=True)
class Manifest:
    kind: str  # "dataset", "checkpoint", "archive", ...
    files: tuple[ManifestFile, ...]
    body: dict[str, Any] = field(default_factory=dict)  # kind-specific fields
    storekit_version: str = __version__

    def to_json(self) -> bytes:
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


MAX_DEPTH = 64  # storekit's own manifests nest about 5 deep; a deeper one is not ours (a recursion bomb)


def parse_manifest(data: bytes, *, source: str) -> Manifest:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{source}: not a valid manifest (JSON error: {exc})") from None
    except RecursionError:
        doc = None  # nested past Python's limit: caught by the depth check below
    if doc is None or _depth(doc) > MAX_DEPTH:
        raise InputError(f"{source}: not a valid manifest (nested deeper than {MAX_DEPTH} levels)")
    if not isinstance(doc, dict):
        raise InputError(f"{source}: not a valid manifest (expected a JSON object)")
    for key in ("schema_version", "kind", "files"):
        if key not in doc:
            raise InputError(f"{source}: not a valid manifest (missing key {key!r})")
    if type(doc["schema_version"]) is not int or doc["schema_version"] != MANIFEST_SCHEMA:
        raise InputError(
            f"{source}: schema_version {doc['schema_version']!r} is not one this storekit reads "
            f"({MANIFEST_SCHEMA})"
        )
    if not isinstance(doc["files"], list):
        raise InputError(f"{source}: not a valid manifest (files is not a list)")
    files = []
    for i, f in enumerate(doc["files"]):
        try:
            files.append(
                ManifestFile(path=clean_rel(f["path"]), size=int(f["size"]), xxh3_128=str(f["xxh3_128"]))
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{source}: files[{i}] is malformed ({exc})") from None
        except PathEscapeError as exc:
            raise InputError(f"{source}: files[{i}] names a path outside its directory ({exc})") from None
    body = {k: v for k, v in doc.items() if k not in ("schema_version", "kind", "files", "storekit_version")}
    return Manifest(
        kind=str(doc["kind"]),
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


def read_manifest(store: Store, directory: str) -> Manifest:
    rel = join_rel(directory, MANIFEST_NAME)
    try:
        data = store.read_bytes(rel)
    except NotFoundError:
        raise NotFoundError(
            f"{store.display_url}/{directory}: no {MANIFEST_NAME} (not a committed dataset/checkpoint)"
        ) from None
    return parse_manifest(data, source=f"{store.display_url}/{rel}")


def write_manifest(store: Store, directory: str, manifest: Manifest) -> None:
    """Atomic: temp + rename on POSIX, a single PUT on S3. Call only after every file is in place."""
    store.write_bytes(join_rel(directory, MANIFEST_NAME), manifest.to_json())


@dataclass(frozen=True)
class VerifyProblem:
    path: str
    problem: str


def verify_manifest(store: Store, directory: str, manifest: Manifest) -> list[VerifyProblem]:
    """Re-hash every file the manifest names; return what is missing or different."""
    problems = []
    for f in manifest.files:
        rel = join_rel(directory, f.path)
        try:
            got = hash_file(store, rel)
        except NotFoundError:
            problems.append(VerifyProblem(f.path, "missing"))
            continue
        except PathEscapeError:
            problems.append(VerifyProblem(f.path, "a symlink that leaves the tier"))
            continue
        except NotRegularFileError as exc:  # a FIFO, a device, a directory: never read
            problems.append(VerifyProblem(f.path, exc.message.rpartition(": ")[2]))
            continue
        if got.size != f.size:
            problems.append(VerifyProblem(f.path, f"size {got.size} != manifest {f.size}"))
        elif got.xxh3_128 != f.xxh3_128:
            problems.append(VerifyProblem(f.path, f"xxh3-128 {got.xxh3_128} != manifest {f.xxh3_128}"))
    return problems


def require_verified(store: Store, directory: str, manifest: Manifest) -> None:
    problems = verify_manifest(store, directory, manifest)
    if problems:
        first = problems[0]
        raise MismatchError(
            f"{store.display_url}/{directory}: {len(problems)} file(s) differ from the manifest; "
            f"first: {first.path}: {first.problem}"
        )
