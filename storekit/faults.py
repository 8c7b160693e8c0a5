"""Deterministic fault-injection points for crash, signal and interleaving tests (off unless set).

Code marks the steps worth breaking with `faults.point("commit.before-rename")`. A test names the
points to fire in the environment, so a subprocess breaks at exactly that step, never "after a while":

    STOREKIT_FAULTS="NAME[@N][=ACTION],..."

N (default 1) fires on the Nth time the process reaches NAME; NAME `*` counts every point reached
(`*@37=kill`: the 37th step of any kind, to crash at each step of a run in turn). ACTION is one of
    kill     SIGKILL this process (the default): a crash at exactly this step
    term     SIGTERM this process; usr1: SIGUSR1 (Slurm's preemption signal); int: SIGINT
    enospc   raise OSError(ENOSPC) here; eio: raise OSError(EIO)
    pause    create $STOREKIT_FAULT_DIR/NAME.reached, then wait until NAME.go exists there: the test
             runs another process while this one is held at the step (forced interleavings)
With STOREKIT_FAULTS unset the cost is one environment lookup per call.

In-process tests can also run their own code at a point: `with faults.at(NAME, fn): ...` (e.g. a
second command started while the first one is held between two commit steps).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

ENV = "STOREKIT_FAULTS"
DIR_ENV = "STOREKIT_FAULT_DIR"
ANY = "*"
_SIGNALS = {"kill": signal.SIGKILL, "term": signal.SIGTERM, "usr1": signal.SIGUSR1, "int": signal.SIGINT}
_ERRNOS = {"enospc": errno.ENOSPC, "eio": errno.EIO}
_reached: dict[str, int] = {}
_counting = threading.Lock()
_actions: dict[str, Callable[[], None]] = {}


def point(name: str) -> None:
    """Mark a step; fires the action the environment names for it, if any."""
    if _actions:
        in_process = _actions.get(name)
        if in_process is not None:
            in_process()
    spec = os.environ.get(ENV)
    if not spec:
        return
    with _counting:  # task threads reach points at once: each nth must be counted exactly once
        count = _reached[name] = _reached.get(name, 0) + 1
        every = _reached[ANY] = _reached.get(ANY, 0) + 1
    for item in spec.split(","):
        target, _, action = item.strip().partition("=")
        point_name, _, nth = target.partition("@")
        if point_name in (name, ANY) and (count, every)[point_name == ANY] == (int(nth) if nth else 1):
            _fire(name, action or "kill")


def _fire(name: str, action: str) -> None:
    if action in _SIGNALS:
        os.kill(os.getpid(), _SIGNALS[action])
        return
    if action in _ERRNOS:
        code = _ERRNOS[action]
        raise OSError(code, f"{os.strerror(code)} (injected at {name})")
    if action == "pause":
        where = os.environ.get(DIR_ENV) or "."
        with open(os.path.join(where, f"{name}.reached"), "w"):
            pass
        go = os.path.join(where, f"{name}.go")
        while not os.path.exists(go):  # waits for an event the test creates, not for a duration
            time.sleep(0.005)
        return
    raise ValueError(
        f"{ENV}: unknown action {action!r} for {name} (kill, term, usr1, int, enospc, eio, pause)"
    )


@contextlib.contextmanager
def at(name: str, action: Callable[[], None]) -> Iterator[None]:
    """Run `action` in this process each time `point(name)` is reached inside the block (tests)."""
    _actions[name] = action
    try:
        yield
    finally:
        _actions.pop(name, None)


def reached(name: str = ANY) -> int:
    """How often `name` (default: any point) was reached while STOREKIT_FAULTS was set."""
    return _reached.get(name, 0)


def reset() -> None:
    """Forget how often each point was reached (in-process tests)."""
    _reached.clear()
