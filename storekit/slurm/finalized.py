"""A note in the job's log dir that the job was finalized: by which element or job, when, what.

Finalize removes the work dir, so whatever runs after it (the `afterok` finalize job once an element
finalized inline, an element Slurm starts late, `jobs status` on the published dataset) finds nothing
there. The log dir stays (under the tier's logs/), and this note in it lets them say "already
finalized" and exit 0 instead of failing, so a successful run is COMPLETED in Slurm's accounting.
(Which dataset a published job wrote is the job kind's business: storekit/pipeline/published.py.)
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


def read_any_note(log_dir: Path) -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = json.loads((log_dir / NOTE).read_bytes())
    except (OSError, ValueError):
        return None
    return doc
