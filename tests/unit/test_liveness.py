"""One answer to "is the process this record names still running" (leases, job temps, bench runs)."""

from __future__ import annotations

import os
import subprocess
import sys

from storekit.liveness import boot_id, process_alive, process_start


def _reaped_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(proc.stdout)


def test_this_process_is_alive_with_its_own_start_and_boot() -> None:
    me, start = os.getpid(), process_start(os.getpid())
    assert start is not None and start.isdigit()
    assert process_alive(me) and process_alive(me, start) and process_alive(me, start, boot=boot_id())


def test_gone_when_proved_so_and_only_then() -> None:
    me, start = os.getpid(), process_start(os.getpid())
    assert not process_alive(_reaped_pid())  # no such process
    assert not process_alive(me, str(int(start or 0) + 1))  # the pid now names a later process
    assert not process_alive(me, start, boot="an-earlier-boot") or boot_id() is None  # rebooted since
    assert not process_alive(0) and not process_alive(-1)
    assert process_alive(1)  # another user's process (or ours as root): alive either way
    assert process_start(_reaped_pid()) is None
