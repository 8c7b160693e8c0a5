"""What runs on each node (`storekit bench agent`, started once per node by srun).

It connects to the coordinator, proves it belongs to this run (the token from the environment),
answers clock pings, checks its node (it sees the run directory on the shared target, free space,
O_DIRECT, the environment), then runs each phase it is sent: fresh worker processes on a two-level
barrier (local workers first, then all nodes through the coordinator), page-cache eviction of the
files it is about to read, and the results back. An abort from the coordinator, or the coordinator
gone, stops its workers at once; no worker outlives its agent (see bench.runner).
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
import os
import queue
import socket
import sys
import threading
import time
from typing import Any

from storekit import faults
from storekit.bench import env, native, pagecache, uring
from storekit.bench.cluster.barrier import NodeBarrier
from storekit.bench.cluster.wire import TOKEN_ENV, Connection, target_from_wire, task_from_wire
from storekit.bench.leftovers import OWNER_FILE
from storekit.bench.plan import DATA_OPS, iter_names
from storekit.bench.runner import PRELOAD, phase_results, run_processes, worker_process_main
from storekit.bench.suite import RESIDENT_SAMPLE, probe_direct
from storekit.diskspace import free_bytes
from storekit.errors import Interrupted, NoSpaceError, StorekitError, error_class

HEARTBEAT_S = 2.0  # "alive" to the coordinator while a phase runs
IDLE_S = 600.0  # no word from the coordinator for this long: it is gone
BARRIER_TIMEOUT_S = 600.0


class PhaseAborted(Exception):
    """The coordinator said abort, or went away."""


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def log(message: str) -> None:
    print(f"agent {node_name()}: {message}", file=sys.stderr, flush=True)


class Agent:
    def __init__(self, conn: Connection, rank: int) -> None:
        self.conn = conn
        self.rank = rank
        self.node = node_name()
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.target: Any = None
        self.run_root = ""
        self.ctx = mp.get_context("forkserver")
        self.last_sent = time.monotonic()

    # -- messages ---------------------------------------------------------------------------------
    def _read(self) -> None:
        """Reader thread: every message (and the end of the connection) becomes an event."""
        try:
            while (msg := self.conn.recv()) is not None:
                self.events.put(("msg", msg))
        except (OSError, StorekitError) as exc:
            self.events.put(("lost", str(exc)))
            return
        self.events.put(("lost", "connection closed"))

    def send(self, kind: str, **body: Any) -> None:
        self.conn.send(kind, **body)
        self.last_sent = time.monotonic()

    def next_message(self, timeout: float) -> dict[str, Any]:
        kind, payload = self.events.get(timeout=timeout)
        if kind == "lost":
            raise PhaseAborted(f"lost the coordinator ({payload})")
        assert kind == "msg"
        return dict(payload)

    # -- the main loop ----------------------------------------------------------------------------
    def serve(self) -> int:
        threading.Thread(target=self._read, name="bench-agent-reader", daemon=True).start()
        self.send("hello", node=self.node, rank=self.rank, host=socket.gethostname(), pid=os.getpid(),
                  token=os.environ.get(TOKEN_ENV, ""))  # fmt: skip
        while True:
            try:
                msg = self.next_message(IDLE_S)
            except queue.Empty:
                log(f"no word from the coordinator for {IDLE_S:.0f} s; exiting")
                return 1
            except PhaseAborted as exc:
                log(f"{exc}; exiting")
                return 1
            kind = msg["kind"]
            try:
                if kind == "ping":
                    self.send("pong", seq=msg["seq"], now_ns=time.time_ns())
                elif kind == "setup":
                    self.send("node", info=self.setup(msg))
                elif kind == "evict":
                    self.send("evicted", info=self.evict(msg))
                elif kind == "phase":
                    self.run_phase(msg)
                elif kind == "abort":  # between phases: nothing runs, say so
                    self.send("aborted", node=self.node)
                elif kind == "shutdown":
                    self.send("bye", node=self.node, run_dir_gone=not os.path.lexists(self.run_root))
                    return 0
            except PhaseAborted as exc:
                log(f"{exc}; stopped this node's workers")
                with contextlib.suppress(OSError):
                    self.send("aborted", node=self.node)
            except Exception as exc:
                cls = error_class(exc) or StorekitError
                log(f"failed: {exc}")
                self.send("error", node=self.node, error=cls.__name__, message=str(exc) or type(exc).__name__)

    # -- node checks ------------------------------------------------------------------------------
    def setup(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.target = target_from_wire(msg["target"])
        self.run_root = str(msg["run_root"])
        faults.point(f"bench.agent{self.rank}.setup")
        if not os.path.exists(os.path.join(self.run_root, OWNER_FILE)):
            raise StorekitError(
                f"the run directory {self.run_root} is not visible there: the target is not shared by "
                "the nodes (a node-local path?)"
            )
        free = free_bytes(self.run_root)
        if free is not None and free < int(msg["space_needed"]):
            raise NoSpaceError(f"{self.run_root} has {free} bytes free, the run needs "
                               f"{msg['space_needed']}")  # fmt: skip
        environment = env.capture(self.target, uring.available())
        info: dict[str, Any] = {"node": self.node, "free_bytes": free, "environment": environment}
        if msg.get("direct"):
            ok, why = probe_direct(os.path.join(self.run_root, f".direct-probe-{self.rank}"))
            info["direct"] = {"requested": True, "effective": ok, "reason": why or None}
        else:
            info["direct"] = {"requested": False, "effective": False, "reason": "--no-direct"}
        if msg.get("meta"):  # build the C timer here, so this node's workers only load it
            ops, why_not = native.load()
            environment["small_file_timer"] = {"timer": "c" if ops else "python", "reason": why_not or None}
        return info

    def evict(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Before a read phase: this node's cache of the files it is about to read goes."""
        info: dict[str, Any] = {"node": self.node}
        if msg.get("drop_caches"):
            done, why = pagecache.drop_caches()
            info.update(dropped=done, reason=why or None)
        else:
            info.update(dropped=False, reason="not requested (--drop-caches)")
        tasks = [task_from_wire(t, self.target) for t in msg["tasks"]]
        if msg.get("op") in DATA_OPS and tasks:
            full = lambda rel: os.path.join(self.run_root, rel)  # noqa: E731
            groups = [t.files for t in tasks]
            info["evicted_files"] = pagecache.evict(map(full, iter_names(groups)))
            sample = itertools.islice(map(full, iter_names(groups)), RESIDENT_SAMPLE)
            info["resident_before"] = pagecache.resident_fraction(sample)
        return info

    # -- one phase --------------------------------------------------------------------------------
    def run_phase(self, msg: dict[str, Any]) -> None:
        tasks = [task_from_wire(t, self.target) for t in msg["tasks"]]
        with contextlib.suppress(ValueError):
            self.ctx.set_forkserver_preload(PRELOAD["posix"])
        ready = self.ctx.Barrier(len(tasks) + 1)
        go = self.ctx.Barrier(len(tasks) + 1)
        barrier = NodeBarrier(ready, go)
        results = self.ctx.Queue()
        procs = [
            self.ctx.Process(target=worker_process_main, args=(t, barrier, results, os.getpid()),
                             name=f"bench-{self.node}-w{t.worker}")
            for t in tasks
        ]  # fmt: skip
        outcomes = run_processes(
            procs,
            barrier,
            started=threading.Thread(target=self._local_ready, args=(ready,), daemon=True).start,
            collect=lambda: self._drive(procs, results, len(tasks), go),
        )
        payload = [dict(r, node=self.node) for r in phase_results(outcomes, str(msg["name"]))]
        self.send("results", phase=msg["phase"], results=payload)

    def _local_ready(self, ready: Any) -> None:
        try:
            ready.wait(BARRIER_TIMEOUT_S)
            self.events.put(("local", "ready"))
        except threading.BrokenBarrierError:
            self.events.put(("local", "broken"))

    def _drive(self, procs: list[Any], results: Any, expected: int, go: Any) -> dict[int, tuple[str, Any]]:
        """Relay the barrier, watch the coordinator and the workers until every worker reported."""
        outcomes: dict[int, tuple[str, Any]] = {}
        while len(outcomes) < expected or (not outcomes and expected == 0):
            with contextlib.suppress(queue.Empty):
                while True:
                    worker, status, payload = results.get_nowait()
                    outcomes[worker] = (status, payload)
            if any(status != "ok" for status, _ in outcomes.values()):
                return outcomes  # the caller stops the rest
            try:
                kind, payload = self.events.get(timeout=0.1)
            except queue.Empty:
                kind, payload = "", None
            if kind == "local" and payload == "ready":
                faults.point(f"bench.agent{self.rank}.ready")  # every local worker has prepared
                self.send("ready")
            elif kind == "msg" and payload["kind"] == "go":
                go.wait(BARRIER_TIMEOUT_S)
                faults.point(f"bench.agent{self.rank}.running")
                if expected == 0:
                    return outcomes
            elif kind == "msg" and payload["kind"] == "abort":
                raise PhaseAborted(f"aborted by the coordinator: {payload.get('reason', '')}")
            elif kind == "lost":
                raise PhaseAborted(f"lost the coordinator ({payload})")
            elif kind == "msg" and payload["kind"] == "ping":
                self.send("pong", seq=payload["seq"], now_ns=time.time_ns())
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead and len(outcomes) < expected:
                with contextlib.suppress(queue.Empty):
                    worker, status, payload = results.get(timeout=1.0)
                    outcomes[worker] = (status, payload)
                    continue
                raise StorekitError(f"worker {dead[0].name} died (exit {dead[0].exitcode})")
            if time.monotonic() - self.last_sent >= HEARTBEAT_S:
                self.send("alive")
        return outcomes


def main(address: str) -> int:
    """`storekit bench agent --connect HOST:PORT`: serve one bench run, then exit."""
    host, _, port = address.rpartition(":")
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    try:
        faults.point(f"bench.agent{rank}.connect")  # a stalled node (hung mount) stops here in tests
        try:
            sock = socket.create_connection((host, int(port)), timeout=60)
        except OSError as exc:
            log(f"cannot reach the coordinator at {address}: {exc.strerror or exc}")
            return 5
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(sock)
        try:
            return Agent(conn, rank).serve()
        finally:
            conn.close()
    except (KeyboardInterrupt, Interrupted):  # srun or the coordinator stops it: nothing resumes
        log("stopped by a signal; the coordinator reports why (a benchmark is run again, not resumed)")
        return 130
