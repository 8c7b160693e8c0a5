"""The coordinator's side: accept one agent per node, then run phases on all of them as one.

`Cluster.run(phase, repeat)` has the local runner's signature, so the Suite drives N nodes exactly as
it drives one machine. Per phase: every agent gets its node's tasks; the coordinator waits until
every node's workers have prepared ("ready"), then tells all nodes "go" at once; results come back
on each node's clock and are moved onto the coordinator's (offsets measured at the handshake).
A node that fails, goes silent or drops its connection aborts the phase on every other node, and
the coordinator waits until they have stopped their workers before anyone cleans up.
"""

from __future__ import annotations

import hmac
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

from storekit import faults
from storekit.bench.cluster.clock import PING_ROUNDS, ClockSample, estimate_offset, to_coordinator_clock
from storekit.bench.cluster.wire import Connection, ProtocolError, target_to_wire, task_to_wire
from storekit.bench.plan import PhasePlan
from storekit.bench.results import WorkerResult
from storekit.bench.spec import TargetSpec
from storekit.errors import NoSpaceError, NotFoundError, StorekitError, UnreachableError

T = TypeVar("T")
HEARTBEAT_S = 2.0
SILENCE_S = 60.0  # a node that says nothing for this long (agents say "alive" every 2 s) is lost
ABORT_WAIT_S = 30.0  # how long the other nodes get to stop their workers after an abort
READY_TIMEOUT_S = 600.0  # as the local start barrier
_ERRORS: dict[str, type[StorekitError]] = {
    "NoSpaceError": NoSpaceError,
    "UnreachableError": UnreachableError,
    "NotFoundError": NotFoundError,
}


class NodeFailed(StorekitError):
    """A node's agent reported an error; the message names the node."""


class NodeLost(UnreachableError):
    """A node's agent stopped answering or its connection dropped (exit 5: retry)."""


class NotConnected(Exception):
    """Not every agent connected in time; `connected` names the nodes that did."""

    def __init__(self, connected: list[str]) -> None:
        super().__init__(f"{len(connected)} connected")
        self.connected = connected


def _step_look_s(waited: float) -> float:
    """How often to ask Slurm whether the agents' job step runs: often at first, then rarely (srun
    may wait hours for an allocation, and each look is a request to the controller)."""
    return 1.0 if waited < 60 else 10.0


class Node:
    def __init__(self, conn: Connection, hello: dict[str, Any]) -> None:
        self.conn = conn
        self.name = str(hello.get("node") or "?")
        self.rank = int(hello.get("rank", 0))
        self.host = str(hello.get("host", ""))
        self.pid = int(hello.get("pid", 0))
        self.clock: dict[str, Any] = {}
        self.info: dict[str, Any] = {}
        self.alive = True
        self.last_heard = time.monotonic()


class Cluster:
    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = sorted(nodes, key=lambda n: n.rank)
        self.events: queue.Queue[tuple[int, dict[str, Any] | None]] = queue.Queue()
        self.phase_id = 0
        self.last_sent = time.monotonic()
        self.cleanup: list[dict[str, Any]] = []
        for index, node in enumerate(self.nodes):
            threading.Thread(target=self._read, args=(index,), daemon=True, name=f"bench-{node.name}").start()

    # -- connections ------------------------------------------------------------------------------
    @classmethod
    def accept(
        cls,
        listener: socket.socket,
        count: int,
        token: str,
        *,
        alive: Any,
        connect_s: float | None,
        step_running: Callable[[], bool] | None = None,
    ) -> Cluster:
        """Accept `count` agents that present the run's token; `alive()` is False once srun ended.
        Once `step_running()` (the agents' job step has started on its nodes) they have `connect_s`
        seconds; once the first has connected, the others have `connect_s` from then (NotConnected):
        a stalled node is named, and a run whose every node stalls does not wait for ever."""
        nodes: list[Node] = []
        listener.settimeout(0.2)
        deadline: float | None = None
        began = next_look = time.monotonic()
        while len(nodes) < count:
            if not alive():
                raise _srun_gone(len(nodes), count)
            now = time.monotonic()
            if deadline is None and step_running is not None and connect_s is not None and now >= next_look:
                next_look = now + _step_look_s(now - began)
                if step_running():
                    deadline = now + connect_s
            if deadline is not None and time.monotonic() > deadline:
                for node in nodes:
                    node.conn.close()
                raise NotConnected([n.name for n in nodes])
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            sock.settimeout(30)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(sock)
            try:
                hello = conn.recv()
            except (OSError, ProtocolError):
                hello = None
            given = str((hello or {}).get("token", ""))
            if not hello or hello.get("kind") != "hello" or not hmac.compare_digest(given, token):
                conn.close()  # not one of ours (a port scan, another run's agent)
                continue
            sock.settimeout(None)
            nodes.append(Node(conn, hello))
            if len(nodes) == 1 and connect_s is not None:  # the others: connect_s from the first
                deadline = time.monotonic() + connect_s
        return cls(nodes)

    def _read(self, index: int) -> None:
        node = self.nodes[index]
        try:
            while (msg := node.conn.recv()) is not None:
                self.events.put((index, msg))
        except (OSError, ProtocolError):
            pass
        self.events.put((index, None))

    def _send(self, node: Node, kind: str, **body: Any) -> None:
        if not node.alive:
            return
        try:
            node.conn.send(kind, **body)
        except OSError:
            node.alive = False
        self.last_sent = time.monotonic()

    def _broadcast(self, kind: str, **body: Any) -> None:
        for node in self.nodes:
            self._send(node, kind, **body)

    def _next(self, timeout: float) -> tuple[Node, dict[str, Any]] | None:
        """The next message from any node; raises when a node is lost, fails or falls silent."""
        try:
            index, msg = self.events.get(timeout=timeout)
        except queue.Empty:
            self._check_silence()
            if time.monotonic() - self.last_sent >= HEARTBEAT_S:
                self._broadcast("alive")
            return None
        node = self.nodes[index]
        node.last_heard = time.monotonic()
        if msg is None:
            node.alive = False
            raise NodeLost(
                f"node {node.name} (rank {node.rank}) dropped its connection (agent killed or node down)"
            )
        if msg["kind"] == "error":
            cls = _ERRORS.get(str(msg.get("error")), NodeFailed)
            raise cls(f"node {node.name} failed: {msg.get('message')}")
        return node, msg

    def _check_silence(self) -> None:
        now = time.monotonic()
        for node in self.nodes:
            if node.alive and now - node.last_heard > SILENCE_S:
                node.alive = False
                raise NodeLost(f"node {node.name} said nothing for {SILENCE_S:.0f} s")

    def _gather(self, kind: str, timeout: float) -> dict[int, dict[str, Any]]:
        """One `kind` message from every node (others, e.g. "alive", only prove they live)."""
        got: dict[int, dict[str, Any]] = {}
        start = time.monotonic()
        for node in self.nodes:  # silence counts from now: between phases the nodes wait quietly
            node.last_heard = max(node.last_heard, start)
        deadline = start + timeout
        while len(got) < len(self.nodes):
            if time.monotonic() > deadline:
                missing = [n.name for i, n in enumerate(self.nodes) if i not in got]
                raise NodeLost(f"no {kind!r} from node(s) {', '.join(missing)} within {timeout:.0f} s")
            item = self._next(0.2)
            if item and item[1]["kind"] == kind:
                got[self.nodes.index(item[0])] = item[1]
        return got

    # -- handshake --------------------------------------------------------------------------------
    def measure_clocks(self, rounds: int = PING_ROUNDS) -> None:
        for node in self.nodes:
            samples = []
            for seq in range(rounds):
                sent = time.time_ns()
                self._send(node, "ping", seq=seq)
                while not ((item := self._next(SILENCE_S)) and item[0] is node and _pong(item[1], seq)):
                    pass
                samples.append(ClockSample(sent, int(item[1]["now_ns"]), time.time_ns()))
            node.clock = estimate_offset(samples)

    def setup(
        self, target: TargetSpec, run_root: str, space_needed: int, *, direct: bool, meta: bool
    ) -> None:
        """Every node checks itself against the run directory the coordinator just created."""
        self._guarded(lambda: self._setup(target, run_root, space_needed, direct, meta))

    def _setup(self, target: TargetSpec, run_root: str, space_needed: int, direct: bool, meta: bool) -> None:
        self._broadcast("setup", target=target_to_wire(target), run_root=run_root,
                        space_needed=space_needed, direct=direct, meta=meta)  # fmt: skip
        for index, msg in self._gather("node", READY_TIMEOUT_S).items():
            self.nodes[index].info = dict(msg["info"])

    def evict(self, phase: PhasePlan, drop_caches: bool) -> list[dict[str, Any]]:
        def run() -> list[dict[str, Any]]:
            for i, node in enumerate(self.nodes):
                tasks = [task_to_wire(t) for t in phase.tasks if t.node == i]
                self._send(node, "evict", op=phase.op, tasks=tasks, drop_caches=drop_caches)
            got = self._gather("evicted", READY_TIMEOUT_S)
            return [dict(got[i]["info"]) for i in range(len(self.nodes))]

        return self._guarded(run)

    # -- phases -----------------------------------------------------------------------------------
    def run(self, phase: PhasePlan, repeat: int) -> list[WorkerResult]:
        return self._guarded(lambda: self._run(phase, repeat))

    def _run(self, phase: PhasePlan, repeat: int) -> list[WorkerResult]:
        self.phase_id += 1
        tasks = [replace(t, seed=t.seed + 7919 * repeat) for t in phase.tasks]
        for i, node in enumerate(self.nodes):
            mine = [task_to_wire(t) for t in tasks if t.node == i]
            self._send(node, "phase", phase=self.phase_id, name=phase.name, op=phase.op, tasks=mine)
        self._gather("ready", READY_TIMEOUT_S)  # every node's workers have prepared
        faults.point(f"bench.{phase.op}.started")
        self._broadcast("go")
        results: list[WorkerResult] = []
        for index, msg in self._gather("results", float("inf")).items():
            offset = int(self.nodes[index].clock.get("offset_ns", 0))
            for data in msg["results"]:
                results.append(to_coordinator_clock(WorkerResult.from_dict(data), offset))
        return sorted(results, key=lambda r: r.worker)

    def _guarded(self, step: Callable[[], T]) -> T:
        """Run a step; on any failure (or Ctrl-C) every other node stops its workers first."""
        try:
            return step()
        except BaseException as exc:
            self.abort(str(exc) or type(exc).__name__)
            raise

    def abort(self, reason: str) -> None:
        """Tell every live node to stop, and wait (bounded) until each has: only then may the
        coordinator remove the run directory they write into."""
        self._broadcast("abort", reason=reason)
        waiting = self._live()
        for index, msg in self._replies(waiting):
            if msg is None or msg["kind"] in ("aborted", "error", "results"):
                waiting.discard(index)

    def _live(self) -> set[int]:
        return {i for i, n in enumerate(self.nodes) if n.alive}

    def _replies(self, pending: set[int]) -> Iterator[tuple[int, dict[str, Any] | None]]:
        """What the nodes send while `pending` (which the caller empties) has any, for ABORT_WAIT_S
        at most; None: that node's connection closed, and it is marked dead."""
        deadline = time.monotonic() + ABORT_WAIT_S
        while pending and time.monotonic() < deadline:
            try:
                index, msg = self.events.get(timeout=0.2)
            except queue.Empty:
                continue
            if msg is None:
                self.nodes[index].alive = False
            yield index, msg

    # -- the end ----------------------------------------------------------------------------------
    def shutdown(self) -> list[dict[str, Any]]:
        """After the coordinator's cleanup: each node says whether it still sees the run directory."""
        self._broadcast("shutdown")
        reports: dict[int, dict[str, Any]] = {}
        pending = self._live()
        for index, msg in self._replies(pending):
            if msg is None:
                pending.discard(index)
            elif msg["kind"] == "bye":
                reports[index] = {"node": self.nodes[index].name, "run_dir_gone": bool(msg["run_dir_gone"])}
                pending.discard(index)
        for node in self.nodes:
            node.conn.close()
        return [reports[i] for i in sorted(reports)]

    def describe(self) -> list[dict[str, Any]]:
        """Per node, for --json: name, host, clock offset, and what its setup found."""
        return [
            {"node": n.name, "rank": n.rank, "host": n.host, "clock": n.clock, **n.info} for n in self.nodes
        ]


def _pong(msg: dict[str, Any], seq: int) -> bool:
    return msg["kind"] == "pong" and msg.get("seq") == seq


def _srun_gone(connected: int, count: int) -> StorekitError:
    return UnreachableError(f"srun ended after {connected} of {count} agents connected")
