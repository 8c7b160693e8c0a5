"""Signals that stop a command the way Ctrl-C does: a KeyboardInterrupt, so cleanup runs and exit is 130."""

from __future__ import annotations

import signal
import threading


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
