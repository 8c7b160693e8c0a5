"""Issue #33: a hostile or careless second user (a real other uid, entered by a forked child) on the
same machine. No swapped or planted directory ever becomes a committed dataset. Interleavings happen
at fault points (storekit.faults), never by timing."""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storekit import faults
from tests.conftest import run_cli, run_storekit
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


def _bins(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*.bin"))}


def test_what_finalize_reads_goes_through_the_held_work_dir_not_its_name(here: Path, capsys: Any) -> None:
    """The tier's admin (uid 1001 owns the tier root, which the ancestor rule trusts) renames
    `scratch/` away once root's tasks are done, puts a look-alike with poisoned tokens (and matching
    completion records) at the name, and swaps back just before the manifest, so the pin check
    passes. Finalize reads through the descriptor it opened at the start: root's own tokens."""
    reference = run_cli([*BASE, "-o", str(here / "ref" / "v1")], capsys)
    assert reference.code == 0, reference.stderr
    storage = here / "storage"
    storage.mkdir()
    os.chown(storage, NEIGHBOUR_UID, NEIGHBOUR_UID)  # the admin's tier root: trusted as the anchor
    scratch, real, evil = storage / "scratch", storage / "scratch-real", storage / "scratch-evil"
    poisoned: list[str] = []

    def plant_and_swap() -> None:
        (work,) = scratch.glob("storekit-prepare-cn-*")
        copy = evil / work.name
        shutil.copytree(work, copy)  # the test plays the admin's foreknowledge of the bytes
        task = copy / "tasks" / "000000"
        tokens = bytes(len((task / "tokens.bin").read_bytes()))  # every token id 0
        (task / "tokens.bin").write_bytes(tokens)
        done = json.loads((task / "done.json").read_bytes())
        done["parts"]["tokens.bin"] = [len(tokens), xxh3(tokens)]
        (task / "done.json").write_text(json.dumps(done))
        for p in [evil, *evil.rglob("*")]:
            os.chown(p, NEIGHBOUR_UID, NEIGHBOUR_UID)
        poisoned.append(work.name)

        def swap() -> None:
            scratch.rename(real)
            evil.rename(scratch)

        as_neighbour(swap)

    def swap_back() -> None:
        def back() -> None:
            scratch.rename(evil)
            real.rename(scratch)

        as_neighbour(back)

    with faults.at("prepare.tasks-done", plant_and_swap), faults.at("finalize.before-manifest", swap_back):
        res = run_cli(BASE, capsys)
    assert poisoned
    assert res.code == 0, res.stderr
    assert _bins(here / FINAL) == _bins(here / "ref" / "v1")  # root's tokens, not the zeros
    assert verify(capsys).code == 0


# -- item 2: a planted "old copy" of a replace, or a planted final dataset ----------------------
def _poisoned_copy(capsys: Any, here: Path, dest: Path) -> None:
    """rtuser's dataset with the very plan id root's run will have (the plan id ignores the output
    path), one extra file listed with its right digest: it verifies, and it is not root's."""
    made = here / "made" / "v1"
    assert run_cli([*BASE, "-o", str(made)], capsys).code == 0
    out = here / FINAL.parent
    out.mkdir(parents=True)
    out.chmod(0o1777)  # a shared output parent, sticky like /tmp

    def plant() -> None:
        shutil.copytree(made, dest)
        (dest / "poison.txt").write_bytes(b"rtuser was here\n")
        doc = json.loads((dest / "manifest.json").read_bytes())
        doc["files"].append({"path": "poison.txt", "size": 16, "xxh3_128": xxh3(b"rtuser was here\n")})
        (dest / "manifest.json").write_text(json.dumps(doc))

    as_neighbour(plant)
    assert dest.stat().st_uid == NEIGHBOUR_UID


def xxh3(data: bytes) -> str:
    import xxhash

    return xxhash.xxh3_128_hexdigest(data)


def test_a_planted_old_copy_of_a_replace_is_never_put_in_place(here: Path, capsys: Any) -> None:
    planted = here / FINAL.parent / ".v1.storekit-tmp-old-deadbeef"
    _poisoned_copy(capsys, here, planted)
    res = run_cli(BASE, capsys)
    assert res.code == 0, res.stderr
    assert res.json()["status"] == "prepared"  # built, not "already prepared" from rtuser's copy
    final = here / FINAL
    assert final.stat().st_uid == 0 and (final / "manifest.json").stat().st_uid == 0
    assert not (final / "poison.txt").exists()
    assert (planted / "poison.txt").exists()  # not ours: neither adopted nor removed
    assert verify(capsys).code == 0


def test_a_planted_final_dataset_of_another_user_is_not_adopted(here: Path, capsys: Any) -> None:
    _poisoned_copy(capsys, here, here / FINAL)
    before = (here / FINAL / "manifest.json").read_bytes()
    res = run_cli(BASE, capsys)
    assert res.code == 1, res.stderr
    err = res.json()["error"]["message"]
    assert f"owned by uid {NEIGHBOUR_UID}, not by you (uid 0) or root" in err
    assert "neither adopts nor replaces it" in err
    assert (here / FINAL / "manifest.json").read_bytes() == before
    forced = run_cli([*BASE, "--force"], capsys)  # nor does --force replace another user's data
    assert forced.code == 1, forced.stderr
    assert (here / FINAL / "manifest.json").read_bytes() == before


# -- item 7: a replace never leaves the path empty, and what a stop leaves is settled -------------
def _prepared_other(capsys: Any, here: Path) -> bytes:
    res = run_cli([*BASE, "--min-chars", "3"], capsys)
    assert res.code == 0, res.stderr
    return (here / FINAL / "manifest.json").read_bytes()


def test_a_full_disk_removing_the_old_copy_after_the_commit_is_not_a_failure(here: Path, capsys: Any) -> None:
    _prepared_other(capsys, here)
    committed: list[bool] = []

    def full() -> None:
        if committed:  # only once the new copy is in place: removing the old one, or the work dir
            raise OSError(28, "No space left on device (injected)")

    with faults.at("commit.renamed", lambda: committed.append(True)), faults.at("durable.tombstoned", full):
        res = run_cli([*BASE, "--force"], capsys)
    assert res.code == 0, res.stderr  # was 6 "no space" for a dataset that was committed
    new = json.loads((here / FINAL / "manifest.json").read_bytes())
    assert new["plan_id"] == res.json()["plan"]["plan_id"]
    assert verify(capsys).code == 0
    left = list((here / FINAL.parent).glob("..v1.storekit-tmp-*.storekit-deleting-*"))
    assert left  # the old copy's tombstone: `..v1` did not match settle_leftovers' prefix
    again = run_cli(BASE, capsys)
    assert again.code == 0 and again.json()["status"] == "unchanged"
    assert not list((here / FINAL.parent).glob(".*.storekit-*")), "the next run settles it"


def test_a_kill_where_the_old_copy_was_moved_never_leaves_the_dataset_path_empty(
    here: Path, capsys: Any
) -> None:
    old = _prepared_other(capsys, here)
    faults_env = {"STOREKIT_FAULTS": "commit.old-moved=kill,commit.exchanged=kill"}
    killed = run_storekit([*BASE, "--force"], cwd=here, env=faults_env)
    assert killed.code == -signal.SIGKILL
    manifest = (here / FINAL / "manifest.json").read_bytes()  # was missing until the next run
    assert manifest != old and verify(capsys).code == 0
    (moved,) = (here / FINAL.parent).glob(".v1.storekit-tmp-*")  # the old copy, under the staging name
    assert (moved / "manifest.json").read_bytes() == old
    again = run_cli([*BASE, "--force"], capsys)
    assert again.code == 0, again.stderr
    assert not list((here / FINAL.parent).glob(".v1.storekit-tmp-*"))
