"""`jobs status TARGET` once a prepare job is over: its work dir gone, its dataset published.

Finalize removes the work dir; the note it leaves in the job's log dir (storekit/slurm/finalized.py)
says by which element or job, when, and which dataset. TARGET is the `follow:` path a submission
printed (a gone work dir) or the dataset.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from storekit.errors import StorekitError
from storekit.jobs.find import search_roots
from storekit.pipeline.location import resolve_location
from storekit.slurm.finalized import read_any_note, read_note


def find_published(target: str, site: Any, tier: str | None) -> dict[str, Any] | None:
    """What `jobs status` says of a TARGET whose job is over: a gone work dir (the `follow:` path a
    submission printed) or a published dataset; None when it is neither."""
    path = Path(target).expanduser()
    if path.name.startswith("storekit-") and not path.exists():
        note = read_note(path.parent.parent / "logs" / path.name, path.absolute())
        return None if note is None else _published(note, None)
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
