"""SIGKILL at random moments, made deterministic: just before the N-th operating-system call of a run.

Fault points kill between the steps of the journal. To land inside the steps too (a copy half written
by one thread while another opens its next file, a rename, a tombstone half emptied, an upload between
two blocks of a part), the forked child counts Python's audit events for file-system and network
calls and SIGKILLs itself just before the N-th; N comes from a seeded RNG over the count an
uninterrupted run reaches. The seed is in the test id: `STOREKIT_TEST_KILL_SEED` draws other moments.
Every moment is a valid crash, so the checks after it hold whichever thread reached it first.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import sys
from collections.abc import Callable

from tests.unit.tier.helpers import child_says, fork_with_faults

SEED = int(os.environ.get("STOREKIT_TEST_KILL_SEED", "20261125"))
# the calls a crash can fall before: everything that creates, changes, renames, deletes or opens a
# file or directory, lists one, or sends a block of an HTTP request (each body block of an upload);
# not socket.connect: how many connections a pool opens depends on timing, and N must be reached
IO_EVENTS = frozenset(
    {
        "open",
        "os.rename",
        "os.remove",
        "os.rmdir",
        "os.mkdir",
        "os.chmod",
        "os.utime",
        "os.symlink",
        "os.link",
        "os.truncate",
        "os.listdir",
        "os.scandir",
        "shutil.rmtree",
        "http.client.send",
    }
)


def _count_events(on_nth: Callable[[int], None]) -> None:
    counter = itertools.count(1)  # next() is atomic: every thread's calls are counted once

    def hook(event: str, _args: object) -> None:
        if event in IO_EVENTS:
            on_nth(next(counter))

    sys.addaudithook(hook)  # in a forked child only: a hook cannot be removed


def io_event_count(fn: Callable[[], object]) -> int:
    """How many IO_EVENTS an uninterrupted `fn` reaches (counted in a forked child)."""
    seen = [0]

    def counted() -> str:
        _count_events(lambda n: seen.__setitem__(0, n))
        fn()
        return str(seen[0])

    return int(child_says(counted))


def io_events_until(fn: Callable[[], object], point: str) -> tuple[int, int]:
    """(IO events before fault point `point` is first reached, IO events of the whole run) of an
    uninterrupted `fn`: the window after `point` is where kills around a step are drawn."""
    from storekit import faults

    seen = [0, 0]

    def counted() -> str:
        _count_events(lambda n: seen.__setitem__(1, n))
        with faults.at(point, lambda: seen.__setitem__(0, seen[0] or seen[1])):
            fn()
        return f"{seen[0]} {seen[1]}"

    first, total = child_says(counted).split()
    return int(first), int(total)


def killed_at_event(fn: Callable[[], object], n: int) -> bool:
    """Run `fn` in a forked child that SIGKILLs itself just before its n-th IO event; True if it was
    killed, False if it finished first. Any other outcome fails the test."""

    def doomed() -> None:
        def on_nth(count: int) -> None:
            if count == n:
                os.kill(os.getpid(), signal.SIGKILL)

        _count_events(on_nth)
        fn()

    _, status = os.waitpid(fork_with_faults(doomed, "never-reached-point"), 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, f"kill before IO event {n}: the child failed"
    return False


def moments(total: int, k: int, *, salt: str) -> list[int]:
    """`k` distinct event numbers in 1..total drawn from SEED (and `salt`, one stream per test)."""
    rng = random.Random(f"{SEED}:{salt}")
    return sorted(rng.sample(range(1, total + 1), min(k, total)))
