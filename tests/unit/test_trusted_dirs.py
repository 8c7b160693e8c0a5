"""Which parents let someone else swap a directory (storekit.trusted_dirs), on real directories with
real owners: a second uid owns some of them (root chowns; without root these skip)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from storekit.errors import MismatchError
from storekit.trusted_dirs import DirPin, HeldDir, mark, marked, unsafe_ancestor, user_key
from tests.hostile import NEIGHBOUR_UID, need_root, shared_base


@pytest.fixture
def base() -> Iterator[Path]:
    need_root()
    yield from shared_base()


def test_sticky_world_writable_parents_are_safe_but_plain_ones_are_not(base: Path) -> None:
    sticky, plain = base / "sticky", base / "plain"
    for folder, mode in ((sticky, 0o1777), (plain, 0o777)):
        folder.mkdir()
        folder.chmod(mode)
    assert unsafe_ancestor(sticky / "wd", None) is None
    problem = unsafe_ancestor(plain / "wd", None)
    assert problem == f"{plain} is writable by group or others without the sticky bit (mode 0777)"


def test_a_parent_owned_by_another_user_is_unsafe_even_when_private(base: Path) -> None:
    theirs = base / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NEIGHBOUR_UID, NEIGHBOUR_UID)
    assert unsafe_ancestor(theirs / "wd", None) == (
        f"{theirs} is owned by uid {NEIGHBOUR_UID} (who may rename what is inside it)"
    )


def test_the_anchor_and_its_owners_directories_below_it_are_trusted(base: Path) -> None:
    tier = base / "tier"
    (tier / "scratch").mkdir(parents=True)
    os.chown(tier, NEIGHBOUR_UID, NEIGHBOUR_UID)  # the tier's admin account
    os.chown(tier / "scratch", NEIGHBOUR_UID, NEIGHBOUR_UID)
    (tier / "scratch").chmod(0o1777)
    assert unsafe_ancestor(tier / "scratch" / "wd", tier) is None
    assert unsafe_ancestor(tier / "scratch" / "wd", None) is not None  # no anchor: not trusted


def test_a_pin_tells_a_swapped_directory(base: Path) -> None:
    work = base / "wd"
    work.mkdir()
    pin = DirPin.take(work)
    pin.check()
    work.rename(base / "aside")
    work.mkdir()
    with pytest.raises(MismatchError, match="was replaced while this run used it"):
        pin.check()


def test_the_users_key_is_private_and_binds_a_tag_to_one_directory(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = base / "state"
    monkeypatch.setenv("STOREKIT_STATE_DIR", str(state))
    assert user_key(create=False) is None
    key = user_key(create=True)
    assert key is not None and len(key) == 32 and user_key(create=False) == key
    assert (state.stat().st_mode & 0o777, (state / "owner.key").stat().st_mode & 0o777) == (0o700, 0o600)
    aside, copy = base / "aside", base / "copy"
    aside.mkdir()
    copy.mkdir()
    tag = mark(key, "n0nce", aside.stat())
    assert marked(key, "n0nce", tag, aside.stat())
    aside.rename(base / "renamed")  # a rename keeps it
    assert marked(key, "n0nce", tag, (base / "renamed").stat())
    assert not marked(key, "n0nce", tag, copy.stat())  # another directory does not carry it
    assert not marked(key, "other", tag, (base / "renamed").stat())
    assert not marked(None, "n0nce", tag, (base / "renamed").stat())
    (state / "owner.key").chmod(0o644)  # readable by others: no longer a secret, not used
    assert user_key(create=False) is None
    (state / "owner.key").chmod(0o600)
    os.chown(state / "owner.key", NEIGHBOUR_UID, NEIGHBOUR_UID)  # someone else's file
    assert user_key(create=True) is None


def test_a_held_dir_reads_through_its_descriptor_after_a_rename(base: Path) -> None:
    work = base / "work"
    (work / "tasks" / "000000").mkdir(parents=True)
    (work / "tasks" / "000000" / "done.json").write_bytes(b"mine")
    held = HeldDir(work)
    work.rename(base / "aside")
    (work / "tasks" / "000000").mkdir(parents=True)
    (work / "tasks" / "000000" / "done.json").write_bytes(b"theirs")
    assert held.read_bytes("tasks/000000/done.json") == b"mine"
    assert held.listdir("tasks") == ["000000"]
    assert held.via("tasks/000000/done.json").read_bytes() == b"mine"
    (base / "aside" / "tasks" / "000000" / "link").symlink_to(work / "tasks" / "000000" / "done.json")
    with pytest.raises(OSError):
        held.open("tasks/000000/link")  # never through a link
    held.close()
