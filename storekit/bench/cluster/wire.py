"""What the coordinator and its agents say to each other: one JSON object per line over TCP.

Each message is {"kind": ..., ...}. A worker's task travels as JSON (never pickle: the port is open
to the network, and a token only proves who connects, not that what it sends is harmless). File
names travel as ranges, so a phase message stays small whatever the number of files.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from dataclasses import fields
from typing import Any

from storekit.bench.plan import NameRange, WorkerTask
from storekit.bench.spec import TargetSpec
from storekit.errors import StorekitError

MAX_MESSAGE = 64 * 1024 * 1024  # a phase's results with their histograms and traces fit easily
TOKEN_ENV = "STOREKIT_BENCH_TOKEN"  # the run's one-time secret: in the environment, never in argv
_TASK_SKIP = ("target", "files")


class ProtocolError(StorekitError):
    """A peer sent something that is not a message of this protocol."""


class Connection:
    """A message stream over one socket; send() may be called from several threads."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rfile = sock.makefile("rb")
        self.lock = threading.Lock()

    def send(self, kind: str, **body: Any) -> None:
        data = json.dumps({"kind": kind, **body}, separators=(",", ":")).encode() + b"\n"
        with self.lock:
            self.sock.sendall(data)

    def recv(self) -> dict[str, Any] | None:
        """The next message, or None when the peer closed the connection."""
        line = self.rfile.readline(MAX_MESSAGE + 1)
        if not line:
            return None
        if not line.endswith(b"\n"):
            raise ProtocolError("message too long or connection cut mid-message")
        try:
            msg = json.loads(line)
        except ValueError:
            raise ProtocolError("a message that is not JSON") from None
        if not isinstance(msg, dict) or not isinstance(msg.get("kind"), str):
            raise ProtocolError("a message without a kind")
        return msg

    def close(self) -> None:
        """Shut the socket down first: a reader thread blocked in recv() then sees the end instead
        of holding the buffered reader's lock against close()."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()


def task_to_wire(task: WorkerTask) -> dict[str, Any]:
    data = {f.name: getattr(task, f.name) for f in fields(task) if f.name not in _TASK_SKIP}
    files = task.files
    if isinstance(files, NameRange):
        data["files"] = {"range": [files.template, files.start, files.stop, files.step]}
    else:
        data["files"] = {"list": list(files)}
    return data


def task_from_wire(data: dict[str, Any], target: TargetSpec) -> WorkerTask:
    known = {f.name for f in fields(WorkerTask)} - set(_TASK_SKIP)
    kwargs = {k: v for k, v in data.items() if k in known}
    files = data.get("files") or {"list": []}
    if "range" in files:
        template, start, stop, step = files["range"]
        names: Any = NameRange(str(template), int(start), int(stop), int(step))
    else:
        names = tuple(str(n) for n in files["list"])
    return WorkerTask(target=target, files=names, **kwargs)


def target_to_wire(target: TargetSpec) -> dict[str, Any]:
    """POSIX targets only: an S3 target's options may hold credentials, which never travel."""
    return {"kind": target.kind, "root": target.root, "tier": target.tier}


def target_from_wire(data: dict[str, Any]) -> TargetSpec:
    return TargetSpec(kind=str(data["kind"]), root=str(data["root"]), tier=data.get("tier"))
