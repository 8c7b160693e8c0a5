"""The element that finishes a job's last task finalizes it at once; the finalize job is the fallback.

Without this the dataset waits for a second dispatch: Slurm notices the array ended, starts the
`afterok` finalize job, which starts Python and loads the plan again (about 1-2 s, more on a busy
controller). So each element, once its own tasks are done, lists tasks/ once; when every task of the
plan has its completion record it claims the finalize with an atomic mkdir (one winner per array,
also when two elements finish together and both see everything done; mkdir is atomic on NFS and
Lustre), runs the job's finalize in-process, and on success leaves a note in the log dir (finalized.py): the
pending finalize job still runs after the array, finds the note and exits 0 (a cancelled one would
read CANCELLED in Slurm's accounting of a successful run).

Every guarantee stays with finalize itself: it checks every completion record under the output
lease, writes the manifest last and publishes nothing unless all tasks are done. If the inline
finalize fails or is stopped (USR1 before the time limit, TERM) the element still exits 0, so
`afterok` holds and the finalize job does it again after the array, as it did before this existed.
An element stopped by a signal never finalizes inline: its time is nearly up.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from storekit import faults
from storekit.errors import NotFoundError, StorekitError
from storekit.jobdir import JobDir
from storekit.slurm.element import ignore_stop_signals
from storekit.slurm.finalized import write_note

CLAIM = "finalizing-inline."  # + the array job id: a directory in the work dir


PROBES = 8  # stats of the highest tasks before a listing


def all_done(work: JobDir) -> bool:
    """Every task of the plan has its completion record. The highest tasks belong to the elements
    Slurm starts last, so a few stats answer "no" for most elements; only one that finds them done
    lists tasks/ (at 1,000 elements of a 10,000-task plan: ~1,000 stats, not 10M entries read)."""
    total = work.header().tasks
    if not all(work.is_done(i) for i in range(total - 1, max(total - 1 - PROBES, -1), -1)):
        return False
    return work.done_tasks() >= set(range(total))


def claim(work: JobDir, array: str) -> bool:
    """True for exactly one caller per array: mkdir either creates the claim or fails."""
    try:
        os.mkdir(work.path / f"{CLAIM}{array}", 0o700)
    except FileExistsError:
        return False
    return True


def pending_finalize_jobs(work: JobDir, array: str) -> list[str]:
    """The finalize jobs submitted to run after `array` (read before finalize removes the work dir)."""
    return [
        s.job_id
        for s in work.submissions()
        if s.extra.get("role") == "finalize" and s.extra.get("after") == array
    ]


def finalize_inline(
    work: JobDir, job: Any, array: str, name: str, say: Callable[[str], None]
) -> dict[str, Any] | None:
    """Finalize here if this element is the first to see every task done; the result, or None when
    another element or the finalize job does it."""
    finish = getattr(job, "finalize", None)
    if finish is None:
        return None
    try:
        if not all_done(work):
            return None
        if not claim(work, array):
            say(f"element {name}: every task is done; another element finalizes")
            return None
    except (NotFoundError, FileNotFoundError):  # it finished between our last task and this look
        say(f"element {name}: every task is done; another element finalized")
        return None
    fallback = pending_finalize_jobs(work, array)
    subs = work.submissions()
    log_dir = next((s.extra.get("log_dir") for s in subs if s.job_id == array), None)
    later = f"finalize job {', '.join(fallback)}" if fallback else "`storekit jobs rerun`"
    say(f"element {name}: every task is done: finalizing here ({later} is the fallback)")
    started = time.monotonic()
    try:
        faults.point("slurm.inline-finalize")
        result: dict[str, Any] = finish()
    except (Exception, KeyboardInterrupt) as exc:  # a stop signal arrives as KeyboardInterrupt
        if isinstance(exc, KeyboardInterrupt):
            ignore_stop_signals()  # exit 0 now: the finalize job takes over
        why = exc.message if isinstance(exc, StorekitError) else (str(exc) or type(exc).__name__)
        say(f"element {name}: finalizing here did not finish ({why}); {later} finalizes after the array")
        return None
    took = time.monotonic() - started
    write_note(log_dir, work.path, result, f"element {name}", [s.job_id for s in subs])
    say(f"element {name}: {result['status']} {result.get('dataset', work.path)} in {took:.1f} s")
    return result
