"""Issue #33 item 6: one odd entry never stops `layout clean`. Another user's link out of the tier,
a link with a tombstone's name, and their abandoned work dir: what must not be followed is not
followed, root reclaims the abandoned work dir, and every entry after them is still processed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from storekit.lease import Lease, dir_lease_path
from tests.conftest import run_cli
from tests.hostile import NEIGHBOUR_UID, as_neighbour, neighbour_cli, shared_dir

__all__ = ["shared_dir"]  # the fixture, imported for pytest
DAY = 86400.0


def age(path: Path, days: float) -> None:
    stamp = time.time() - days * DAY
    for dirpath, dirs, files in os.walk(path, topdown=False):
        for name in [*files, *dirs]:
            os.utime(os.path.join(dirpath, name), (stamp, stamp), follow_symlinks=False)
    os.utime(path, (stamp, stamp), follow_symlinks=False)


def test_clean_goes_on_past_links_out_and_reclaims_another_users_abandoned_work_dir(
    shared_dir: Path, capsys: Any
) -> None:
    assert run_cli(["init", "--quiet"], capsys).code == 0
    scratch = shared_dir / "storage" / "scratch"
    outside = shared_dir / "shared" / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_bytes(b"not the tier's\n")
    work = scratch / "a-storekit-prepare-rt"

    def neighbour() -> None:
        (scratch / "foo").symlink_to(outside)  # ln -s /tmp/x scratch/foo
        (scratch / f".b{'.storekit-deleting-'}abc").symlink_to(outside)
        work.mkdir(mode=0o700)
        (work / "plan.json").write_bytes(b"{}")
        Lease(dir_lease_path(work), purpose="a run that is killed").acquire()  # never released

    as_neighbour(neighbour)  # the child exits holding the lease: it is stale now
    assert work.stat().st_uid == NEIGHBOUR_UID
    later = scratch / "z-old-run"
    (later / "sub").mkdir(parents=True)
    (later / "sub" / "data.bin").write_bytes(b"x" * 100)
    for path in (scratch / "foo", work, later):
        age(path, 30)

    dry = run_cli(["layout", "clean", "--dry-run", "--json"], capsys)
    assert dry.code == 0, dry.stdout
    planned = {e["path"]: e["action"] for e in dry.json()["entries"]}
    assert planned["scratch/foo"] == "delete" and planned["scratch/z-old-run"] == "delete"
    assert planned["scratch/a-storekit-prepare-rt"] == "delete"
    assert os.path.islink(scratch / "foo") and later.exists()  # a dry run removes nothing

    res = run_cli(["layout", "clean", "--json"], capsys)
    assert res.code == 0, res.stdout
    deleted = set(res.json()["deleted"])
    expected = {"scratch/a-storekit-prepare-rt", "scratch/foo", "scratch/.b.storekit-deleting-abc"}
    assert deleted == expected | {"scratch/z-old-run"}
    assert sorted(os.listdir(scratch)) == []
    assert (outside / "keep.txt").read_bytes() == b"not the tier's\n"  # links removed, never followed


def test_a_user_cleaning_skips_what_is_not_theirs_and_goes_on(shared_dir: Path, capsys: Any) -> None:
    """uid 1001 cleans a tier where root's expired dir comes first in scratch/ (sticky: only its
    owner or root may remove it). It is reported as skip with the reason, and the neighbour's own
    expired dir after it is still removed (apply stopped with exit 1 at the first)."""
    assert run_cli(["init", "--quiet"], capsys).code == 0
    scratch = shared_dir / "storage" / "scratch"
    roots, mine = scratch / "a-roots-old-run", scratch / "z-my-old-run"
    (roots / "sub").mkdir(parents=True)
    (roots / "sub" / "data.bin").write_bytes(b"r" * 100)

    def neighbour() -> None:
        mine.mkdir()
        (mine / "data.bin").write_bytes(b"m" * 100)

    as_neighbour(neighbour)
    for path in (roots, mine):
        age(path, 30)
    code, stdout, stderr = neighbour_cli(["layout", "clean", "--json"], shared_dir / "shared" / "out.json")
    assert code == 0, stdout + stderr
    doc = json.loads(stdout)
    assert doc["deleted"] == ["scratch/z-my-old-run"]
    entry = next(e for e in doc["entries"] if e["path"] == "scratch/a-roots-old-run")
    assert entry["action"] == "skip" and "operation not permitted" in entry["reason"], entry
    assert (roots / "sub" / "data.bin").read_bytes() == b"r" * 100  # root's: untouched, not half-deleted
    assert not mine.exists()
