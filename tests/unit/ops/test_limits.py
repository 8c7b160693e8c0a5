"""The transfer engine's arithmetic: part sizes, the bandwidth bucket, the byte cap, the retry budget.

Clocks are injected: these tests check what the code decides, never how long anything took.
"""

from __future__ import annotations

import threading

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from storekit.errors import is_retryable
from storekit.ops.s3transfer import S3_MAX_PARTS, MiB, part_size_for
from storekit.ops.throttle import ByteBudget, TokenBucket
from storekit.store.retry import RetryBudgetExceeded, RetryPolicy, call_with_retries


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (0, 64 * MiB),
        (64 * MiB * 9_500, 64 * MiB),
        (64 * MiB * 9_500 + 1, 64 * MiB + 1),  # just past: parts grow instead of the count
        (5 * 1024**4, -(-5 * 1024**4 // 9_500)),  # a 5 TiB object (S3's maximum)
    ],
)
def test_part_size_keeps_under_the_part_ceiling(size: int, expected: int) -> None:
    part = part_size_for(size, min_part_size=64 * MiB, max_parts=S3_MAX_PARTS)
    assert part == expected
    assert -(-size // part) <= 9_500


def test_part_size_with_a_lowered_ceiling() -> None:
    part = part_size_for(48 * MiB, min_part_size=5 * MiB, max_parts=4)
    assert part == -(-48 * MiB // 3)  # 95 % of 4 parts is 3
    assert -(-48 * MiB // part) == 3


def test_token_bucket_long_run_rate_is_the_cap() -> None:
    clock = FakeClock()
    bucket = TokenBucket(100.0, burst=100.0, clock=clock, sleep=clock.sleep)
    start = clock.now
    assert bucket.take(100) == 0.0  # the burst is free
    assert bucket.take(50) == pytest.approx(0.5)
    assert bucket.take(250) == pytest.approx(2.5)  # larger than the burst: a debt waited out
    assert clock.now - start == pytest.approx(3.0)
    sent = 400
    assert (sent - 100) / (clock.now - start) == pytest.approx(100.0)


def test_token_bucket_refills_while_idle_but_not_beyond_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10.0, burst=20.0, clock=clock, sleep=clock.sleep)
    bucket.take(20)
    clock.now += 100.0  # idle: credit caps at the burst, not 1000 bytes
    assert bucket.take(20) == 0.0
    assert bucket.take(10) == pytest.approx(1.0)


def test_token_bucket_rejects_a_zero_rate() -> None:
    with pytest.raises(ValueError, match="positive"):
        TokenBucket(0)


def test_byte_budget_blocks_until_released() -> None:
    budget = ByteBudget(100)
    budget.acquire(60)
    assert not budget.try_acquire(50)
    admitted = threading.Event()

    def second() -> None:
        budget.acquire(50)
        admitted.set()

    t = threading.Thread(target=second)
    t.start()
    assert not admitted.is_set()
    budget.release(60)  # the event the waiter needs, not a duration
    t.join()
    assert admitted.is_set() and budget.in_use == 50 and budget.peak == 60


def test_byte_budget_admits_one_oversized_request_alone() -> None:
    budget = ByteBudget(10)
    assert budget.try_acquire(25)  # alone: slower, never a deadlock
    assert not budget.try_acquire(1)
    budget.release(25)
    assert budget.try_acquire(1)


def _connection_error() -> Exception:
    return EndpointConnectionError(endpoint_url="http://127.0.0.1:1")


def _client_error(code: str, status: int) -> Exception:
    return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")


def test_retryable_classification() -> None:
    assert is_retryable(_connection_error())
    assert is_retryable(ReadTimeoutError(endpoint_url="http://x"))
    assert is_retryable(ConnectionResetError())
    assert is_retryable(_client_error("SlowDown", 503))
    assert is_retryable(_client_error("InternalError", 500))
    assert not is_retryable(_client_error("AccessDenied", 403))
    assert not is_retryable(_client_error("NoSuchUpload", 404))
    assert not is_retryable(ValueError("bug"))


def _outage(clock: FakeClock, seconds: float) -> object:
    """A gateway that refuses connections for `seconds` of (fake) time, then answers."""
    end = clock.now + seconds
    calls = []

    def request() -> str:
        calls.append(clock.now)
        if clock.now < end:
            raise _connection_error()
        return "ok"

    request.calls = calls  # type: ignore[attr-defined]
    return request


def test_retries_ride_out_a_60_second_restart() -> None:
    clock = FakeClock()
    request = _outage(clock, 60.0)
    policy = RetryPolicy(budget_s=120.0, first_delay_s=0.25, max_delay_s=4.0)
    assert call_with_retries(request, policy=policy, clock=clock, sleep=clock.sleep) == "ok"  # type: ignore[arg-type]
    assert max(clock.slept) == 4.0  # backoff capped: the restart is noticed within 4 s
    assert 60.0 <= clock.now - 1000.0 < 64.0


def test_retries_stop_when_the_budget_is_spent() -> None:
    clock = FakeClock()
    request = _outage(clock, 1000.0)
    policy = RetryPolicy(budget_s=120.0)
    with pytest.raises(RetryBudgetExceeded) as info:
        call_with_retries(request, policy=policy, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    assert isinstance(info.value.__cause__, EndpointConnectionError)
    assert clock.now - 1000.0 <= 120.0


def test_non_retryable_errors_are_not_retried() -> None:
    clock = FakeClock()
    calls = []

    def denied() -> None:
        calls.append(1)
        raise _client_error("AccessDenied", 403)

    with pytest.raises(ClientError):
        call_with_retries(denied, policy=RetryPolicy(), clock=clock, sleep=clock.sleep)
    assert calls == [1] and clock.slept == []
