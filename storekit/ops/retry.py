"""Per-request retries with a time budget long enough to ride out a gateway restart.

botocore's own retries are switched off for the transfer engine (a fixed attempt count is either
too few for a 60 s restart or far too many for a dead endpoint); each request is retried here until
`budget_s` has passed since its first failure. Connection errors count: s3fs does not retry those.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from storekit import faults
from storekit.errors import is_retryable

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    budget_s: float = 120.0  # from a request's first failure: a 30-60 s gateway restart fits twice
    first_delay_s: float = 0.25
    max_delay_s: float = 4.0


class RetryBudgetExceeded(Exception):
    """A request kept failing with retryable errors for the whole budget (the last one is the cause)."""


def call_with_retries(
    fn: Callable[[], T],
    *,
    policy: RetryPolicy,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`fn()`, retried on retryable errors with capped exponential backoff until the budget is spent.

    Non-retryable errors propagate at once; a spent budget raises RetryBudgetExceeded from the last error.
    """
    first_failure: float | None = None
    delay = policy.first_delay_s
    while True:
        try:
            return fn()
        except Exception as exc:
            if not is_retryable(exc):
                raise
            now = clock()
            if first_failure is None:
                first_failure = now
            if now + delay - first_failure > policy.budget_s:
                raise RetryBudgetExceeded(
                    f"still failing after {now - first_failure:.0f} s of retries: {exc}"
                ) from exc
        faults.point("transfer.retry")
        sleep(delay)
        delay = min(delay * 2, policy.max_delay_s)
