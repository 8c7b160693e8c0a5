"""Signals that stop a command the way Ctrl-C does: a KeyboardInterrupt, so cleanup runs and exit is 130."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def interrupt_on(*signals: signal.Signals) -> None:
    """Turn each signal into a KeyboardInterrupt in the main thread (SIGTERM from kill or systemd,
    SIGUSR1 from Slurm's preemption notice). Only the main thread gets signals: elsewhere (a command
    run in-process from a task thread, as tests do) the main thread's handlers already stand."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in signals:
        signal.signal(sig, _raise_interrupt)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """A stop signal arriving inside the block is taken at its end (KeyboardInterrupt there), not
    in the middle: for steps that must not be cut in two, such as starting a thread, after which
    the caller must know the thread runs and wait for it. Main thread only; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    saved = {}
    for sig in _STOP_SIGNALS:
        handler = signal.getsignal(sig)
        if handler in (_raise_interrupt, signal.default_int_handler):
            saved[sig] = handler
            signal.signal(sig, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    if caught:
        raise KeyboardInterrupt
