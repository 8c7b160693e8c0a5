"""`--slurm-wait`: stay until a submitted job has finalized (its work dir gone) or its jobs ended.

Finalize publishes the manifest, then removes the work dir: the work dir gone is the finished
signal, one stat per look wherever the work dir is (inotify sees nothing another node writes on
NFS or Lustre, so this polls). Looks start every 10 ms and slow down to 0.25 % of the time
waited, at most one a second: an answer at most ~0.25 % late (~20 ms on a 7 s job), and an
hours-long job costs the metadata server one stat a second. Slurm is asked far less often
(squeue, at most every 5 % of the time waited, between 1 and 30 s): only to notice that the jobs
have all left the queue while the work dir is still there, i.e. they ended without publishing (a
failed task, a cancelled job).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from storekit import faults
from storekit.slurm import commands

FIRST_LOOK_S = 0.01
MAX_LOOK_S = 1.0
MIN_ASK_S, MAX_ASK_S = 1.0, 30.0


@dataclass(frozen=True)
class Waited:
    finished: bool  # the work dir is gone: finalize ran to its end
    seconds: float


def look_interval(waited: float) -> float:
    return min(MAX_LOOK_S, max(FIRST_LOOK_S, waited / 400))


def ask_interval(waited: float) -> float:
    return min(MAX_ASK_S, max(MIN_ASK_S, waited / 20))


def wait_for_jobs(
    work: Path,
    job_ids: Sequence[str],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    queued: Callable[[Sequence[str]], list[commands.QueuedJob]] = commands.queued,
) -> Waited:
    """Until the work dir is gone (finished) or none of `job_ids` is queued while it is still there
    (ended without publishing). Raises what squeue raises (the controller down: exit 5)."""
    started = clock()
    next_ask = started + MIN_ASK_S
    while True:
        faults.point("slurm.wait-look")
        now = clock()
        if not work.exists():
            return Waited(True, now - started)
        if now >= next_ask:
            if not _alive(queued(job_ids)):  # gone: look once more, it may have just ended
                return Waited(not work.exists(), clock() - started)
            next_ask = now + ask_interval(now - started)
        sleep(look_interval(now - started))


def _alive(rows: list[commands.QueuedJob]) -> bool:
    """Some job can still run: a finalize left pending on a failed array (a site without
    kill_invalid_depend) never will."""
    return any(row.reason != "DependencyNeverSatisfied" for row in rows)
