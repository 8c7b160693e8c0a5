"""Limits shared by every thread of a transfer: a bandwidth cap and a cap on bytes held in memory."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sized
from typing import Generic, TypeVar

B = TypeVar("B", bound=Sized)


class TokenBucket:
    """A bandwidth cap: `take(n)` returns once `n` bytes fit under `rate` bytes/s.

    The bucket holds up to `burst` bytes of credit. A request larger than the credit is let through
    and leaves a debt that later callers wait out, so the long-run rate is `rate` whatever the
    request sizes. Clock and sleep are injectable: tests check the arithmetic, not the wall clock.
    """

    def __init__(
        self,
        rate: float,
        *,
        burst: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"bandwidth cap must be positive, got {rate}")
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else rate)
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.burst
        self._last = clock()
        self._lock = threading.Lock()

    def take(self, n: int) -> float:
        """Reserve `n` bytes; sleeps as long as the cap requires and returns the seconds waited."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= n
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)  # outside the lock: later callers queue behind the debt, not the lock
        return wait


class ByteBudget:
    """At most `cap` bytes of part buffers alive at once: the transfer's memory is this cap.

    A single request larger than the cap is admitted alone, so a cap below the part size slows a
    transfer down instead of deadlocking it.
    """

    def __init__(self, cap: int) -> None:
        if cap <= 0:
            raise ValueError(f"in-flight byte cap must be positive, got {cap}")
        self.cap = cap
        self.in_use = 0
        self.peak = 0
        self._cond = threading.Condition()

    def acquire(self, n: int) -> None:
        with self._cond:
            while self.in_use > 0 and self.in_use + n > self.cap:
                self._cond.wait()
            self.in_use += n
            self.peak = max(self.peak, self.in_use)

    def try_acquire(self, n: int) -> bool:
        with self._cond:
            if self.in_use > 0 and self.in_use + n > self.cap:
                return False
            self.in_use += n
            self.peak = max(self.peak, self.in_use)
            return True

    def release(self, n: int) -> None:
        with self._cond:
            self.in_use -= n
            self._cond.notify_all()


class PartBuffers(Generic[B]):
    """Part buffers used again rather than allocated per part: a fresh 64 MiB object is mapped anew
    and faults in every page (~0.3 CPU-s per GB read on the test host, a fifth of an upload's client
    CPU). Only buffers of one size (the part size in use) are kept, at most `cap` bytes of them; a
    buffer is either in flight (under ByteBudget) or here, so the memory bound stays the cap."""

    def __init__(self, cap: int, alloc: Callable[[int], B] = bytearray) -> None:  # type: ignore[assignment]
        self.cap = cap
        self._alloc = alloc
        self._size = 0
        self._free: list[B] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> B:
        with self._lock:
            if self._free and self._size == size:
                return self._free.pop()
        return self._alloc(size)

    def give(self, buf: B) -> None:
        with self._lock:
            if len(buf) != self._size:  # the part size changed (a huge file): keep the new size only
                self._free, self._size = [], len(buf)
            if (len(self._free) + 1) * len(buf) <= self.cap:
                self._free.append(buf)
