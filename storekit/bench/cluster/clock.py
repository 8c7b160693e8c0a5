"""Clock offsets between the coordinator and each node, measured at the handshake, as NTP does.

The coordinator sends a ping at t0 (its clock), the agent answers with its own clock t_a, the answer
arrives at t1. If the path is symmetric, t_a was read at (t0 + t1) / 2, so offset = t_a - (t0 + t1) / 2,
wrong by at most half the round trip. The sample with the shortest round trip bounds the error best.
Worker timestamps from a node are moved onto the coordinator's clock before phases are merged, so
"first start" and "last finish" across nodes compare like with like.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from storekit.bench.results import WorkerResult
from storekit.bench.stats import FINE_NS

PING_ROUNDS = 8


@dataclass(frozen=True)
class ClockSample:
    sent_ns: int  # coordinator clock
    remote_ns: int  # agent clock
    received_ns: int  # coordinator clock

    @property
    def rtt_ns(self) -> int:
        return self.received_ns - self.sent_ns


def estimate_offset(samples: list[ClockSample]) -> dict[str, Any]:
    """The node clock minus the coordinator's, from the sample with the shortest round trip."""
    if not samples:
        raise ValueError("no clock samples")
    best = min(samples, key=lambda s: s.rtt_ns)
    offset = best.remote_ns - (best.sent_ns + best.received_ns) // 2
    return {
        "offset_ns": offset,
        "rtt_ns": best.rtt_ns,
        "uncertainty_ns": best.rtt_ns // 2,
        "samples": len(samples),
        "corrected": True,
    }


def to_coordinator_clock(result: WorkerResult, offset_ns: int) -> WorkerResult:
    """Move a node's worker timestamps (and its progress trace) onto the coordinator's clock."""
    result.start_ns -= offset_ns
    result.end_ns -= offset_ns
    if result.trace.origin >= 0:
        result.trace.origin -= round(offset_ns / FINE_NS)
    return result
