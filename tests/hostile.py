"""A second, hostile user on the same machine: a real uid other than the test's, entered by a forked
child through os.setgid/os.setuid (the suite runs as root on CI; without root these tests skip)."""

from __future__ import annotations

import os
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

NEIGHBOUR_UID = 1001  # the red team's rtuser: any uid that is not ours works, no passwd entry needed
NEIGHBOUR_GID = 1001


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to act as a second user (os.setuid in a child)")


def as_neighbour(action: Callable[[], None], uid: int = NEIGHBOUR_UID) -> None:
    """Run `action` in a forked child as `uid`; re-raise here if it failed there."""
    need_root()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges for good, then act
        code = 0
        try:
            os.setgroups([])
            os.setgid(NEIGHBOUR_GID)
            os.setuid(uid)
            os.umask(0o022)
            action()
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"the neighbour's action failed (status {status})"


def shared_base() -> Iterator[Path]:
    """A directory both users reach (pytest's tmp dirs are 0700 root): /tmp/storekit-hostile-*, 0755."""
    base = Path(tempfile.mkdtemp(prefix="storekit-hostile-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def shared_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A run directory (cwd) both users reach, with a 1777 `shared/` in it like /tmp."""
    need_root()
    for base in shared_base():
        monkeypatch.chdir(base)
        monkeypatch.delenv("STOREKIT_CONFIG", raising=False)
        monkeypatch.delenv("STOREKIT_FAULTS", raising=False)
        (base / "shared").mkdir()
        (base / "shared").chmod(0o1777)
        yield base


def neighbour_cli(args: list[str], out: Path) -> tuple[int, str, str]:
    """`storekit ARGS` run as the neighbour (in this cwd, in a forked child); (code, stdout, stderr).
    `out`: a file the child may write, that carries the result back."""
    import json

    from tests.conftest import run_cli

    def run() -> None:
        ran = run_cli(args)
        out.write_text(json.dumps([ran.code, ran.stdout, ran.stderr]))

    as_neighbour(run)
    code, stdout, stderr = json.loads(out.read_text())
    return int(code), str(stdout), str(stderr)
