"""The two-level start barrier a worker waits on when it runs on a cluster node.

Level 1: the node's workers and its agent (`ready`). When it completes, every worker has prepared,
and the agent tells the coordinator. Level 2 (`go`): the agent joins it when the coordinator has
heard "ready" from every node and says go, so all nodes' workers start together. Aborting breaks
both, so a worker never waits for a node that is gone.
"""

from __future__ import annotations

from typing import Any


class NodeBarrier:
    def __init__(self, ready: Any, go: Any) -> None:
        self.ready = ready  # multiprocessing Barriers: workers + the agent
        self.go = go

    def wait(self, timeout: float | None = None) -> int:
        self.ready.wait(timeout)
        return int(self.go.wait(timeout))

    def abort(self) -> None:
        self.ready.abort()
        self.go.abort()
