"""Deterministic kill points for the resume tests (environment variables, off unless set).

STOREKIT_TEST_KILL_AFTER_TASKS=N      SIGKILL the run after N task completion records
STOREKIT_TEST_KILL_AFTER_SHARDS=N     SIGKILL finalize after N final shards are written
STOREKIT_TEST_KILL_BEFORE_MANIFEST=1  SIGKILL finalize just before the manifest is written
"""

from __future__ import annotations

import os
import signal


def maybe_kill(variable: str, count: int) -> None:
    wanted = os.environ.get(variable)
    if wanted and wanted.isdigit() and int(wanted) == count:
        os.kill(os.getpid(), signal.SIGKILL)
