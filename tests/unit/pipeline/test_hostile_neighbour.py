"""Issue #33: a hostile or careless second user (a real other uid, entered by a forked child) on the
same machine. No swapped or planted directory ever becomes a committed dataset. Interleavings happen
at fault points (storekit.faults), never by timing."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storekit import faults
from tests.conftest import run_cli
from tests.hostile import NEIGHBOUR_UID, as_neighbour, need_root, shared_base
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl

FINAL = Path("storage/datasets/text/cn/v1")
BASE = ["prepare", "dataset", "--tokenizer", TOKENIZER, "--name", "cn", "-i", "corpus.jsonl"]
BASE += ["--json", "--quiet", "--workers", "1", "--shard-size", "8KiB", "--task-size", "8KiB"]


@pytest.fixture
def here(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A run directory both users can reach, with a corpus and a 1777 `shared/` (like /tmp)."""
    need_root()
    for base in shared_base():
        monkeypatch.chdir(base)
        monkeypatch.delenv("STOREKIT_CONFIG", raising=False)
        monkeypatch.delenv("STOREKIT_FAULTS", raising=False)
        write_jsonl(base / "corpus.jsonl", sample_records(limit_bytes=24_000, max_doc=4_000))
        (base / "shared").mkdir(mode=0o777)
        (base / "shared").chmod(0o1777)
        yield base


def verify(capsys: Any, where: str = "datasets/text/cn/v1") -> Any:
    return run_cli(["dataset", "verify", where, "--json"], capsys)


# -- item 1: a work dir in a directory another user controls ------------------------------------
def test_a_work_dir_inside_another_users_directory_is_refused(here: Path, capsys: Any) -> None:
    """rtuser owns `evil-wd` (0777) and could swap root's private dir inside it once tasks exist."""
    evil = here / "shared" / "evil-wd"

    def plant() -> None:
        evil.mkdir()
        evil.chmod(0o777)

    as_neighbour(plant)
    res = run_cli([*BASE, "--work-dir", str(evil)], capsys)
    assert res.code == 1, res.stderr
    err = res.json()["error"]["message"]
    assert f"{evil} is owned by uid {NEIGHBOUR_UID}" in err and "someone else could swap it" in err
    assert list(evil.iterdir()) == []  # nothing of root's was made inside it
    assert not (here / FINAL).exists()


def test_a_work_dir_swapped_while_tasks_run_is_never_published(here: Path, capsys: Any) -> None:
    """Whatever renamed the work dir (only root or its owner can, now), the run notices before
    the manifest: the parts it read are not from the directory it made."""
    swapped: list[Path] = []

    def swap() -> None:
        (work,) = (here / "storage" / "scratch").glob("storekit-prepare-cn-*")
        aside = work.with_name("aside")
        work.rename(aside)
        shutil.copytree(aside, work)  # the same bytes, other directory: still not what this run made
        swapped.append(work)

    with faults.at("prepare.tasks-done", swap):
        res = run_cli(BASE, capsys)
    assert swapped
    assert res.code == 4, res.stderr
    assert "was replaced while this run used it: nothing was published" in res.stderr
    assert not (here / FINAL).exists()
    assert not list((here / FINAL).parent.glob(".v1.storekit-tmp-*"))
