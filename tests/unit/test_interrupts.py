from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from storekit.interrupts import interrupt_on


@pytest.fixture
def restore_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_stop_signal_becomes_a_keyboard_interrupt(sig: signal.Signals, restore_handlers: None) -> None:
    interrupt_on(signal.SIGTERM, signal.SIGUSR1)
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(sig)
