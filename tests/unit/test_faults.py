"""Fault-injection points: storekit.faults (the mechanism every crash and interleaving test uses)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from storekit import faults

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    faults.reset()


def test_unset_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(faults.ENV, raising=False)
    for _ in range(3):
        faults.point("a")


def test_fires_on_the_nth_time_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(faults.ENV, "other=eio,a@3=enospc")
    faults.point("a")
    faults.point("a")
    with pytest.raises(OSError, match="injected at a") as info:
        faults.point("a")
    assert info.value.errno == 28
    faults.point("a")  # the 4th time passes


def test_star_counts_every_point_of_any_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(faults.ENV, "*@4=eio")
    for name in ("a", "b", "a"):
        faults.point(name)
    with pytest.raises(OSError, match="injected at c"):
        faults.point("c")
    faults.point("a")
    assert (faults.reached(), faults.reached("a")) == (5, 3)


def test_unknown_action_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(faults.ENV, "a=explode")
    with pytest.raises(ValueError, match="'explode' for a"):
        faults.point("a")


@pytest.mark.parametrize(
    ("action", "signum"), [("kill", signal.SIGKILL), ("", signal.SIGKILL), ("term", signal.SIGTERM)]
)
def test_signal_actions_hit_the_process_at_the_point(action: str, signum: int) -> None:
    code = "from storekit import faults\nprint('before', flush=True)\nfaults.point('p')\nprint('after')"
    spec = f"p={action}" if action else "p"
    env = {**os.environ, "PYTHONPATH": str(REPO), faults.ENV: spec}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signum
    assert proc.stdout == "before\n"


def test_pause_holds_the_step_until_the_test_releases_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(faults.ENV, "p=pause")
    monkeypatch.setenv(faults.DIR_ENV, str(tmp_path))
    done = threading.Event()

    def step() -> None:
        faults.point("p")
        done.set()

    worker = threading.Thread(target=step)
    worker.start()
    while not (tmp_path / "p.reached").exists():  # the worker reached the step
        worker.join(0.01)
    assert not done.is_set()  # held until released
    (tmp_path / "p.go").touch()
    worker.join(60)
    assert done.is_set()


def test_threads_reaching_points_at_once_count_each_exactly_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Task threads share the counters: the nth reach must fire once, never twice or not at all."""
    nth = 7_777
    monkeypatch.setenv(faults.ENV, f"step@{nth}=eio")
    faults.reset()
    fired: list[str] = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows: a lost update shows

    def reach() -> None:
        for _ in range(2_000):
            try:
                faults.point("step")
            except OSError as exc:
                fired.append(str(exc))

    try:
        pool = [threading.Thread(target=reach) for _ in range(8)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert faults.reached("step") == 16_000 and faults.reached() == 16_000
    assert fired == ["[Errno 5] Input/output error (injected at step)"]
    faults.reset()
