"""Signals that stop a command the way Ctrl-C does: a KeyboardInterrupt, so cleanup runs and exit is 130."""

from __future__ import annotations

import signal


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def interrupt_on(*signals: signal.Signals) -> None:
    """Turn each signal into a KeyboardInterrupt in the main thread (SIGTERM from kill or systemd,
    SIGUSR1 from Slurm's preemption notice)."""
    for sig in signals:
        signal.signal(sig, _raise_interrupt)
