"""Units keep their owner and group across a drain and a recall run as root (the README's epilog
way), so a user's mode-600 checkpoint stays readable to that user; a mover that is not root says
which entries it could not give back their owner. A real second uid: os.setuid in forked children."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storekit.tier.mover import drain_unit, recall_unit
from storekit.tier.unitwalk import walk_unit
from tests.unit.tier.helpers import child_says, make_unit, posix_site, snapshot

USER, OTHER = 1234, 4321
UNIT = "checkpoints/run_001/step_100"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to a second uid")


def as_user(uid: int, body: Callable[[], str]) -> str:
    def switched() -> str:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        return body()

    return child_says(switched)


@pytest.fixture
def base() -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix="storekit-owners-"))
    os.chmod(where, 0o755)  # a second uid must reach what is below
    try:
        yield where
    finally:
        shutil.rmtree(where)


def owners(root: Path) -> set[tuple[int, int]]:
    return {(os.lstat(p).st_uid, os.lstat(p).st_gid) for p in [root, *root.rglob("*")]}


def test_a_drain_and_recall_as_root_keep_the_users_owner(base: Path) -> None:
    burst, parallel, journal = base / "burst", base / "parallel", base / "journal"
    burst.mkdir()
    parallel.mkdir()
    os.chown(burst, USER, USER)

    def write() -> str:
        make_unit(burst / UNIT, seed=5)  # mode-600 files among them
        return "ok"

    assert as_user(USER, write) == "ok"
    before = snapshot(burst / UNIT)
    rank0 = "model/rank0.pt"
    assert os.stat(burst / UNIT / rank0).st_mode & 0o777 == 0o600
    site = posix_site(burst, parallel)
    drain_unit(burst, UNIT, site.tier("parallel"), journal_dir=journal)  # we are root here
    assert owners(parallel / UNIT) == {(USER, USER)}
    made = [parallel / "checkpoints", parallel / "checkpoints/run_001"]  # the run dirs it made, too
    assert {(os.stat(d).st_uid, os.stat(d).st_gid) for d in made} == {(USER, USER)}
    assert snapshot(parallel / UNIT) == before

    def read(where: Path) -> Callable[[], str]:
        return lambda: (where / rank0).read_bytes().hex()

    assert as_user(USER, read(parallel / UNIT)) == before[rank0][3].hex()  # type: ignore[union-attr]
    recall_unit(burst, UNIT, journal_dir=journal, site=site)
    assert owners(burst / UNIT) == {(USER, USER)} and snapshot(burst / UNIT) == before
    assert as_user(USER, read(burst / UNIT)) == before[rank0][3].hex()  # type: ignore[union-attr]
    assert {(e.uid, e.gid) for e in walk_unit(burst / UNIT)} == {(USER, USER)}


def test_a_mover_that_is_not_root_reports_the_owners_it_could_not_keep(base: Path) -> None:
    burst, parallel, journal = base / "burst", base / "parallel", base / "journal"
    for d in (burst / "checkpoints/run_001", parallel, journal):
        d.mkdir(parents=True)
        os.chown(d, USER, USER)
    unit = burst / UNIT
    (unit / "sub").mkdir(parents=True)
    (unit / "a.bin").write_bytes(b"a" * 100)
    (unit / "sub/b.bin").write_bytes(b"b" * 10)
    for p in [unit, *unit.rglob("*")]:
        os.chown(p, OTHER, OTHER)  # another user's unit, readable by all (644 / 755)
    site = posix_site(burst, parallel)

    def drain() -> str:
        r = drain_unit(burst, UNIT, site.tier("parallel"), journal_dir=journal, free_source=False)
        return json.dumps(list(r.not_owned))

    not_owned = json.loads(as_user(USER, drain))
    assert sorted(not_owned) == [".", "a.bin", "sub", "sub/b.bin"]
    assert owners(parallel / UNIT) == {(USER, USER)}  # the copy is the mover's, and it said so
    log = (journal / "actions.log").read_text()
    assert "drain.owners-not-restored" in log
