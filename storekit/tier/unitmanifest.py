"""What a unit is, exactly: every file (size, xxh3-128, mode, mtime_ns, uid, gid), link and directory.

The archive manifest is built from the digests computed while the source was read, stored beside
the copy last (present = complete) and is the truth a recall and `tier verify` check against. Object
metadata and ETags are never the truth. A walk also gives the unit's fingerprint (size, mtime_ns,
ctime_ns, inode of every entry): a unit whose fingerprint changed between copy and free is not freed.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import asdict, dataclass

import xxhash

from storekit.errors import InputError, MismatchError

MANIFEST_SUFFIX = ".storekit-archive.json"
MANIFEST_KIND = "storekit-archive-manifest"
MANIFEST_VERSION = 1
FILE, DIR, LINK = "file", "dir", "symlink"


@dataclass(frozen=True, kw_only=True)
class UnitEntry:
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


def walk_unit(root: str | os.PathLike[str]) -> list[UnitEntry]:
    """Every entry of the unit at `root` (a directory or a single file), parents before children.

    Symlinks are recorded, never followed. Anything else (fifo, socket, device) is refused: a copy
    could not bring it back.
    """
    root = os.fspath(root)
    top = os.lstat(root)
    if stat.S_ISREG(top.st_mode):
        return [_entry(".", top)]
    if not stat.S_ISDIR(top.st_mode):
        raise InputError(f"{root}: a unit must be a directory or a regular file")
    entries = [_entry(".", top)]
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(os.path.join(root, rel_dir)) as it:
            children = sorted(it, key=lambda e: e.name)
        for child in children:
            rel = f"{rel_dir}/{child.name}" if rel_dir else child.name
            st = child.stat(follow_symlinks=False)
            entry = _entry(rel, st, child.path)
            entries.append(entry)
            if entry.type == DIR:
                stack.append(rel)
    return sorted(entries, key=lambda e: (e.path != ".", e.path))


def _entry(rel: str, st: os.stat_result, full: str = "") -> UnitEntry:
    common = {
        "path": rel,
        "mode": stat.S_IMODE(st.st_mode),
        "mtime_ns": st.st_mtime_ns,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "ctime_ns": st.st_ctime_ns,
        "inode": st.st_ino,
    }
    if stat.S_ISREG(st.st_mode):
        return UnitEntry(type=FILE, size=st.st_size, **common)  # type: ignore[arg-type]
    if stat.S_ISDIR(st.st_mode):
        return UnitEntry(type=DIR, **common)  # type: ignore[arg-type]
    if stat.S_ISLNK(st.st_mode):
        return UnitEntry(type=LINK, target=os.readlink(full), **common)  # type: ignore[arg-type]
    raise InputError(f"{full}: neither a file, a directory nor a symlink; a unit cannot hold it")


def fingerprint(entries: list[UnitEntry]) -> list[list[object]]:
    return [list(e.fingerprint()) for e in entries]


@dataclass(frozen=True, kw_only=True)
class UnitManifest:
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
            "kind": MANIFEST_KIND,
            "version": MANIFEST_VERSION,
            "unit": self.unit,
            "source": self.source,
            "files": len(self.files),
            "bytes": self.total_bytes,
            "entries": [e.manifest_dict() for e in self.entries],
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"


def manifest_digest(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def parse_manifest(data: bytes, where: str) -> UnitManifest:
    """A manifest read back from a tier; MismatchError (exit 4) naming `where` when it is damaged."""
    try:
        doc = json.loads(data)
        if doc.get("kind") != MANIFEST_KIND or doc.get("version") != MANIFEST_VERSION:
            raise ValueError(f"not a {MANIFEST_KIND} of version {MANIFEST_VERSION}")
        entries = []
        for raw in doc["entries"]:
            kind = str(raw["type"])
            if kind not in (FILE, DIR, LINK):
                raise ValueError(f"unknown entry type {kind!r}")
            path = str(raw["path"])
            if path != "." and (path.startswith("/") or ".." in path.split("/") or "" in path.split("/")):
                raise ValueError(f"entry path {path!r} leaves the unit")
            entries.append(
                UnitEntry(
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
            )
        return UnitManifest(unit=str(doc["unit"]), source=str(doc["source"]), entries=entries)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise MismatchError(f"{where}: not a valid storekit archive manifest ({exc})") from None


def sibling_name(unit_name: str) -> str:
    return f"{unit_name}{MANIFEST_SUFFIX}"
