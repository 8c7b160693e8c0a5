"""A note in the job's log dir that the job was finalized: by which element or job, when, what.

Finalize removes the work dir, so whatever runs after it (the `afterok` finalize job once an element
finalized inline, an element Slurm starts late, `jobs status` on the published dataset) finds nothing
there. The log dir stays (under the tier's logs/), and this note in it lets them say "already
finalized" and exit 0 instead of failing, so a successful run is COMPLETED in Slurm's accounting.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from storekit.durable import write_file_atomic

NOTE = "finalized.json"


def write_note(
    log_dir: Path | str | None, work_dir: Path, result: dict[str, Any], by: str, jobs: list[str]
) -> None:
    """Best effort: the dataset is published whether or not the note can be written."""
    if not log_dir:
        return
    doc = {
        "work_dir": str(work_dir),
        "status": result.get("status"),
        "dataset": result.get("dataset"),
        "jobs": jobs,
        "log_dir": str(log_dir),
        "finalized_by": by,
        "finalized_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with contextlib.suppress(OSError):
        write_file_atomic(Path(log_dir) / NOTE, json.dumps(doc, indent=1).encode() + b"\n", mode=0o640)


def read_note(log_dir: Path | str | None, work_dir: Path) -> dict[str, Any] | None:
    """The note for `work_dir`, if its log dir holds one."""
    if not log_dir:
        return None
    try:
        doc: dict[str, Any] = json.loads((Path(log_dir) / NOTE).read_bytes())
    except (OSError, ValueError):
        return None
    return doc if doc.get("work_dir") == str(work_dir) else None


def find_published(target: str, site: Any, tier: str | None) -> dict[str, Any] | None:
    """What `jobs status` says of a TARGET whose job is over: a gone work dir (the `follow:` path a
    submission printed) or a published dataset; None when it is neither."""
    from storekit.jobs.find import search_roots

    path = Path(target).expanduser()
    if path.name.startswith("storekit-") and not path.exists():
        note = read_note(path.parent.parent / "logs" / path.name, path.absolute())
        return None if note is None else _published(note, None)
    from storekit.errors import StorekitError
    from storekit.pipeline.location import resolve_location

    try:
        location = resolve_location(target, site, tier)
    except StorekitError:
        return None
    local = location.local_path()
    if local is None or not (Path(local) / "manifest.json").is_file():
        return None
    notes = []
    for root in search_roots(site, None, local):
        logs = root.parent / "logs"
        with contextlib.suppress(OSError):
            for entry in sorted(logs.iterdir()):
                doc = read_any_note(entry)
                if doc is not None and doc.get("dataset") == location.display:
                    notes.append(doc)
    notes.sort(key=lambda d: str(d.get("finalized_at")))
    return _published(notes[-1] if notes else {"dataset": location.display}, local)


def read_any_note(log_dir: Path) -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = json.loads((log_dir / NOTE).read_bytes())
    except (OSError, ValueError):
        return None
    return doc


def _published(note: dict[str, Any], local: str | None) -> dict[str, Any]:
    return {
        "state": "published",
        "dataset": note.get("dataset"),
        "path": local,
        "finalized_at": note.get("finalized_at"),
        "finalized_by": note.get("finalized_by"),
        "jobs": note.get("jobs", []),
        "log_dir": note.get("log_dir"),
        "work_dir": note.get("work_dir"),
    }
