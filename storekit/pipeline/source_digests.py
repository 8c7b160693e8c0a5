"""Source digests for the manifest, computed by the tasks that read the sources (distributed).

The task holding a source's first piece hashes the whole source once and records the manifest entry
in the work dir (`sources/NNNNNN.json`, atomically), so a finalize on another node does not re-read
the corpus. A source without a record (its task ran before this existed, or on the local executor,
which hashes in a background thread) is hashed by whoever asks for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from storekit.background import Background
from storekit.durable import write_file_atomic
from storekit.ops import hash_stream
from storekit.pipeline.formats.base import SourceFile
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.plan import PrepPlan

SOURCES = "sources"


def owned_sources(plan: PrepPlan, index: int) -> list[int]:
    """Sources whose first piece is in task `index` (that task hashes them)."""
    return sorted({p.source for p in plan.tasks[index].pieces if p.start == 0})


def record_path(work: Path, source: int) -> Path:
    return work / SOURCES / f"{source:06d}.json"


def read_record(plan: PrepPlan, work: Path, source: int) -> dict[str, Any] | None:
    """The recorded entry, if it was made from the source as the plan now describes it (a record of
    an input fixed since, and re-planned by `jobs rerun`, is stale: None)."""
    try:
        doc = json.loads(record_path(work, source).read_bytes())
    except (FileNotFoundError, ValueError):
        return None
    src = plan.sources[source]
    if not isinstance(doc, dict) or [doc.get("size"), doc.get("mtime")] != [src.size, src.mtime]:
        return None
    entry: dict[str, Any] = doc["entry"]
    return entry


def source_entry(src: SourceFile, fs: InputFS) -> dict[str, Any]:
    """What the manifest says of one source: read whole through its store and hashed now."""
    with fs.open(src.url) as fh:
        digest = hash_stream(fh.read)
    return {
        "path": src.display,
        "size": digest.size,
        "xxh3_128": digest.xxh3_128,
        "format": src.format,
        "compression": src.compression,
    }


def hash_source(plan: PrepPlan, source: int, work: Path, fs: InputFS) -> dict[str, Any]:
    """The manifest entry of one source: its record, else hashed now and recorded."""
    entry = read_record(plan, work, source)
    if entry is not None:
        return entry
    src = plan.sources[source]
    entry = source_entry(src, fs)
    record = record_path(work, source)
    record.parent.mkdir(exist_ok=True, mode=0o700)
    doc = {"entry": entry, "size": src.size, "mtime": src.mtime}  # what the plan said when hashed
    write_file_atomic(record, json.dumps(doc).encode(), mode=0o600)
    return entry


def recorded_digests(plan: PrepPlan, work: Path) -> list[dict[str, Any]] | None:
    """Every source's recorded entry, or None when any is missing (one listing, then one read each)."""
    try:
        names = set((work / SOURCES).iterdir())
    except FileNotFoundError:
        return None
    if len(names) < len(plan.sources):
        return None
    entries = [read_record(plan, work, s) for s in range(len(plan.sources))]
    return None if any(e is None for e in entries) else [e for e in entries if e is not None]


def hash_sources(plan: PrepPlan, fs: InputFS) -> Background[list[dict[str, Any]]]:
    """xxh3-128 of every source file for the manifest, computed while the workers tokenize."""
    return Background(lambda: [source_entry(src, fs) for src in plan.sources], "storekit-source-hash")
