"""The one retry rule for S3 requests: retried until a time budget has passed since the first failure.

botocore's own retries are off for every client storekit makes (store.s3client): a fixed attempt
count is either too few for a 60 s gateway restart or far too many for a dead endpoint. Every
request, the store's and the transfer engine's, goes through `call_with_retries`; what is retryable
is `errors.is_retryable` (connection errors, timeouts, 5xx, SlowDown). Only the budget differs:
STORE_RETRY for a store's calls (a dead endpoint is exit 5 in seconds, as the commands promise),
RetryPolicy() for the transfer engine (a tier move rides out a gateway restart).
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


# a store's calls: ~3 tries over ~2 s of a refused connection, 2 tries of a silent one (5 s connect
# timeout each): what the store's 3 botocore attempts were before this rule replaced them
STORE_RETRY = RetryPolicy(budget_s=2.0)


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
