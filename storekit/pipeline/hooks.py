"""Deterministic fault points for the resume, kill and interleaving tests (off unless set).

STOREKIT_TEST_KILL_AFTER_TASKS=N      SIGKILL the run after N task completion records
STOREKIT_TEST_KILL_AFTER_SHARDS=N     SIGKILL finalize after N final shards are written
STOREKIT_TEST_KILL_BEFORE_MANIFEST=1  SIGKILL finalize just before the manifest is written
STOREKIT_TEST_KILL_AT=NAME            SIGKILL the process when it reaches `point(NAME)`

In-process tests run their own code at a named point with `at(NAME, fn)` (e.g. a second prepare
started while the first one sits between two commit steps).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator

_actions: dict[str, Callable[[], None]] = {}


def maybe_kill(variable: str, count: int) -> None:
    wanted = os.environ.get(variable)
    if wanted and wanted.isdigit() and int(wanted) == count:
        os.kill(os.getpid(), signal.SIGKILL)


def point(name: str) -> None:
    """A named step of a multi-step change (commit, replace, removal)."""
    action = _actions.get(name)
    if action is not None:
        action()
    if os.environ.get("STOREKIT_TEST_KILL_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def at(name: str, action: Callable[[], None]) -> Iterator[None]:
    """Run `action` whenever `point(name)` is reached, while the block runs (tests only)."""
    _actions[name] = action
    try:
        yield
    finally:
        _actions.pop(name, None)
