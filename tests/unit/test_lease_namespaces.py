"""Issue #33 item 9: a lease held from another PID namespace on the same host (a container: its
holder is pid 1 there) binds while its holder lives; it is not taken for a dead process's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from storekit.errors import BusyError
from storekit.lease import Lease, read_lease
from tests.conftest import storekit_env

HOLD = """
import sys
from pathlib import Path
from storekit.lease import Lease
lease = Lease(Path(sys.argv[1]), purpose="writing the dataset x")
lease.acquire()
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
lease.release()
"""


def test_a_live_holder_in_another_pid_namespace_keeps_its_lease(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to start a process in a new PID namespace")
    path = tmp_path / ".v1.storekit-lease"
    cmd = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", HOLD, str(path)]
    holder = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=storekit_env()
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline() == "held\n"
        info = read_lease(path)
        assert info is not None and info.pid == 1  # pid 1 here is another process entirely
        with pytest.raises(BusyError, match="another storekit process is writing the dataset x"):
            Lease(path, purpose="writing the dataset x").acquire()
        assert read_lease(path) == info  # not broken
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert holder.returncode == 0
    assert not path.exists()  # released by its holder, which was alive all along
