"""Which parents let someone else swap a directory (storekit.trusted_dirs), on real directories with
real owners: a second uid owns some of them (root chowns; without root these skip)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from storekit.errors import MismatchError
from storekit.trusted_dirs import DirPin, unsafe_ancestor
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
