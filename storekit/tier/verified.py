"""When each committed copy was last read back whole, or found bad: `<journal dir>/verified/<id>.json`.

A purge rule with `verify_max_age` frees a source without reading its copy again only when that
copy's manifest (by URL and xxh3-128) was verified that recently: by the move's own read-back before
its commit, by an earlier purge's read-back, or by `storekit tier verify` of every file. A record
made for another manifest digest (the copy was replaced since) does not count.

Trust is revoked by evidence: a read-back that failed (a purge's, `tier verify`'s, even of a sample,
a recall's) is recorded too, and no verification older than the last failure counts again. Each
verification also keeps the copy's stamp (every file's size, mtime, ctime and inode; an object's
size, ETag and Last-Modified): a copy touched since it was read back is read back again.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import xxhash

from storekit.durable import fsync_dir, remove_write_temps_in, write_file_atomic

VERIFIED_DIR = "verified"


def _record_path(journal_dir: Path, manifest_url: str) -> Path:
    return journal_dir / VERIFIED_DIR / f"{xxhash.xxh3_64_hexdigest(manifest_url.encode())}.json"


def _read(journal_dir: Path, manifest_url: str) -> dict[str, Any]:
    try:
        doc = json.loads(_record_path(journal_dir, manifest_url).read_bytes())
    except (FileNotFoundError, ValueError):
        return {}
    return doc if isinstance(doc, dict) and doc.get("manifest") == manifest_url else {}


def _write(journal_dir: Path, doc: dict[str, Any]) -> None:
    path = _record_path(journal_dir, str(doc["manifest"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(doc, sort_keys=True).encode() + b"\n"
    try:
        write_file_atomic(path, data, mode=0o600)
    except FileNotFoundError:  # `tier gc` took our temp for a killed writer's: write it again
        write_file_atomic(path, data, mode=0o600)
    fsync_dir(path.parent)


def record_verified(
    journal_dir: Path, manifest_url: str, digest: str, *, stamp: str = "", at: float | None = None
) -> None:
    """Every file of the copy whose manifest is `manifest_url` (with `digest`) read back and matched;
    `stamp` is the copy's stamp taken before that reading (storekit.tier.dest `stamp`)."""
    doc = _read(journal_dir, manifest_url)
    doc.update(
        manifest=manifest_url,
        manifest_xxh3_128=digest,
        at=time.time() if at is None else at,
        copy_stamp=stamp,
    )
    _write(journal_dir, doc)


def record_failed(journal_dir: Path, manifest_url: str, problem: str, *, at: float | None = None) -> None:
    """A read-back of the copy at `manifest_url` found it bad: every earlier verification is void."""
    doc = _read(journal_dir, manifest_url)
    doc.update(manifest=manifest_url, failed_at=time.time() if at is None else at, failed=problem[:500])
    _write(journal_dir, doc)


def remove_temps(journal_dir: Path) -> None:
    """Temps of record writes that a kill left (`tier gc`)."""
    remove_write_temps_in(journal_dir / VERIFIED_DIR)


def verified_at(journal_dir: Path, manifest_url: str, digest: str, stamp: str | None = None) -> float | None:
    """When that copy was last verified whole; None if never, only an older copy by that name, a
    failed read-back since, or (given `stamp`, the copy's stamp now) the copy changed since."""
    doc = _read(journal_dir, manifest_url)
    with contextlib.suppress(TypeError, ValueError, KeyError):
        if doc.get("manifest_xxh3_128") != digest or "at" not in doc:
            return None
        at = float(doc["at"])
        if "failed_at" in doc and float(doc["failed_at"]) >= at:
            return None
        if stamp is not None and doc.get("copy_stamp") != stamp:
            return None
        return at
    return None


def last_failure(journal_dir: Path, manifest_url: str) -> str | None:
    """What the last failed read-back of that copy found, if it is newer than any verification."""
    doc = _read(journal_dir, manifest_url)
    with contextlib.suppress(TypeError, ValueError):
        if "failed_at" in doc and float(doc["failed_at"]) >= float(doc.get("at", 0.0)):
            return str(doc.get("failed", "a read-back failed"))
    return None
