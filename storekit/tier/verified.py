"""When each committed copy was last read back whole: `<journal dir>/verified/<id>.json`.

A purge rule with `verify_max_age` frees a source without reading its copy again only when that
copy's manifest (by URL and xxh3-128) was verified that recently: by the move's own read-back before
its commit, by an earlier purge's read-back, or by `storekit tier verify` of every file. A record
made for another manifest digest (the copy was replaced since) does not count.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import xxhash

from storekit.durable import fsync_dir, remove_write_temps_in, write_file_atomic

VERIFIED_DIR = "verified"


def _record_path(journal_dir: Path, manifest_url: str) -> Path:
    return journal_dir / VERIFIED_DIR / f"{xxhash.xxh3_64_hexdigest(manifest_url.encode())}.json"


def record_verified(journal_dir: Path, manifest_url: str, digest: str, *, at: float | None = None) -> None:
    """Every file of the copy whose manifest is `manifest_url` (with `digest`) read back and matched."""
    path = _record_path(journal_dir, manifest_url)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"manifest": manifest_url, "manifest_xxh3_128": digest, "at": time.time() if at is None else at}
    data = json.dumps(doc, sort_keys=True).encode() + b"\n"
    try:
        write_file_atomic(path, data, mode=0o600)
    except FileNotFoundError:  # `tier gc` took our temp for a killed writer's: write it again
        write_file_atomic(path, data, mode=0o600)
    fsync_dir(path.parent)


def remove_temps(journal_dir: Path) -> None:
    """Temps of record writes that a kill left (`tier gc`)."""
    remove_write_temps_in(journal_dir / VERIFIED_DIR)


def verified_at(journal_dir: Path, manifest_url: str, digest: str) -> float | None:
    """When that copy was last verified whole; None if never (or only an older copy by that name)."""
    try:
        doc = json.loads(_record_path(journal_dir, manifest_url).read_bytes())
    except (FileNotFoundError, ValueError):
        return None
    with contextlib.suppress(TypeError, ValueError, AttributeError):
        if doc.get("manifest") == manifest_url and doc.get("manifest_xxh3_128") == digest:
            return float(doc["at"])
    return None
