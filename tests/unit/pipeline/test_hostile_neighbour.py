"""Issue #33: a hostile or careless second user (a real other uid, entered by a forked child) on the
same machine. No swapped or planted directory ever becomes a committed dataset. Interleavings happen
at fault points (storekit.faults), never by timing."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from storekit import faults
from tests.conftest import run_cli, run_storekit
from tests.hostile import NEIGHBOUR_UID, as_neighbour, neighbour_cli, shared_dir
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl

__all__ = ["shared_dir"]  # the fixture, imported for pytest

FINAL = Path("storage/datasets/text/cn/v1")
BASE = ["prepare", "dataset", "--tokenizer", TOKENIZER, "--name", "cn", "-i", "corpus.jsonl"]
BASE += ["--json", "--quiet", "--workers", "1", "--shard-size", "8KiB", "--task-size", "8KiB"]


@pytest.fixture
def here(shared_dir: Path) -> Path:
    """A run directory both users can reach, with a corpus and a 1777 `shared/` (like /tmp)."""
    write_jsonl(shared_dir / "corpus.jsonl", sample_records(limit_bytes=24_000, max_doc=4_000))
    return shared_dir


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


def test_an_output_parent_another_user_owns_is_refused(here: Path, capsys: Any) -> None:
    """The staging dir and the old copy of a replace live beside the dataset: the owner of that
    directory could rename them (a poisoned staging dir swapped in before the commit). Refused
    before anything is written there, with one line naming the directory."""
    out = here / FINAL.parent
    out.mkdir(parents=True)
    os.chown(out, NEIGHBOUR_UID, NEIGHBOUR_UID)  # theirs, 0755: nobody else may write, they may rename
    res = run_cli(BASE, capsys)
    assert res.code == 1, res.stderr
    err = res.json()["error"]["message"]
    assert f"{out} is owned by uid {NEIGHBOUR_UID}" in err and "someone else could swap it" in err
    assert os.listdir(out) == []  # no lease, no staging dir, no dataset


def _plant_old_copy(capsys: Any, here: Path, dest: Path, owner: int) -> None:
    """A copy of a dataset with the very plan id the victim's run will have, set beside the final
    name as an "old copy of an interrupted replace", one extra file listed with its digest."""
    made = here / "made" / "v1"
    assert run_cli([*BASE, "-o", str(made)], capsys).code == 0
    shutil.copytree(made, dest)
    (dest / "poison.txt").write_bytes(b"not made by the victim's storekit\n")
    doc = json.loads((dest / "manifest.json").read_bytes())
    data = (dest / "poison.txt").read_bytes()
    doc["files"].append({"path": "poison.txt", "size": len(data), "xxh3_128": xxh3(data)})
    (dest / "manifest.json").write_text(json.dumps(doc))
    for p in [dest, *dest.rglob("*")]:
        os.chown(p, owner, owner)


def test_an_old_copy_owned_by_root_is_not_put_in_place_for_another_user(
    here: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uid 1001 prepares into its own tier; an "old copy" it never set aside sits beside the empty
    dataset path, owned by root (whom ownership alone trusts). Its storekit did not make it, so it
    is neither put in place nor removed: the run builds the dataset itself."""
    storage = here / "storage"
    out = here / FINAL.parent
    out.mkdir(parents=True)
    for p in (storage, storage / "datasets", storage / "datasets" / "text", out):
        os.chown(p, NEIGHBOUR_UID, NEIGHBOUR_UID)
    planted = out / ".v1.storekit-tmp-old-deadbeef-0123456789abcdef0123456789abcdef"
    _plant_old_copy(capsys, here, planted, owner=0)
    state = here / "rt-state"
    state.mkdir(mode=0o700)
    os.chown(state, NEIGHBOUR_UID, NEIGHBOUR_UID)
    monkeypatch.setenv("STOREKIT_STATE_DIR", str(state))  # the neighbour's own private state
    code, stdout, stderr = neighbour_cli(BASE, here / "shared" / "result.json")
    assert code == 0, stderr
    assert json.loads(stdout)["status"] == "prepared"  # was "unchanged": root's look-alike, adopted
    final = here / FINAL
    assert final.stat().st_uid == NEIGHBOUR_UID
    assert (final / "manifest.json").stat().st_uid == NEIGHBOUR_UID
    assert not (final / "poison.txt").exists()
    assert (planted / "poison.txt").exists()  # not its own: left where it is
    assert _bins(final) == _bins(here / "made" / "v1")
    assert verify(capsys).code == 0


def test_an_old_copy_made_by_hand_is_not_put_in_place(here: Path, capsys: Any) -> None:
    """The same user's own directory under an old copy's name (a hand copy, another tool's) is not
    something this user's storekit set aside: owning it is not enough."""
    planted = here / FINAL.parent / ".v1.storekit-tmp-old-deadbeef"
    (here / FINAL.parent).mkdir(parents=True)
    _plant_old_copy(capsys, here, planted, owner=0)
    res = run_cli(BASE, capsys)
    assert res.code == 0, res.stderr
    assert res.json()["status"] == "prepared"
    assert not (here / FINAL / "poison.txt").exists()
    assert (planted / "poison.txt").exists()
    assert verify(capsys).code == 0


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_replace_of_another_user_is_put_back_by_its_rerun_with_another_plan(
    here: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the key is for: uid 1001's replace killed between its two renames (no renameat2) leaves
    the old copy aside; its next run, with a different plan, finds its own tag and puts it back."""
    storage = here / "storage"
    storage.mkdir()
    os.chown(storage, NEIGHBOUR_UID, NEIGHBOUR_UID)
    state = here / "rt-state"
    state.mkdir(mode=0o700)
    os.chown(state, NEIGHBOUR_UID, NEIGHBOUR_UID)
    # a run as root first: the neighbour's forked runs use the modules it loaded (on some hosts
    # uid 1001 may not read the interpreter's own files)
    assert run_cli([*BASE, "-o", str(here / "made" / "v1")], capsys).code == 0
    result = here / "shared" / "result.json"
    monkeypatch.setenv("STOREKIT_STATE_DIR", str(state))  # the neighbour's own private state
    first = neighbour_cli([*BASE, "--min-chars", "3"], result)
    assert first[0] == 0, first
    old = (here / FINAL / "manifest.json").read_bytes()

    def no_exchange() -> None:  # a file system without renameat2: the two journaled renames
        raise OSError(errno.EINVAL, "injected: no RENAME_EXCHANGE here")

    def killed_replace() -> None:  # as uid 1001: its run killed where the old copy was moved
        pid = os.fork()
        if pid == 0:
            with faults.at("durable.exchange", no_exchange), faults.at("commit.old-moved", _kill_self):
                run_cli([*BASE, "--force"])
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == signal.SIGKILL

    as_neighbour(killed_replace)
    assert not (here / FINAL).exists()
    (moved,) = (here / FINAL.parent).glob(".v1.storekit-tmp-old-*")
    assert moved.stat().st_uid == NEIGHBOUR_UID
    code, _, stderr = neighbour_cli([*BASE, "--min-chars", "5"], result)  # another plan
    assert code == 1 and "already holds a different dataset" in stderr
    assert (here / FINAL / "manifest.json").read_bytes() == old  # put back first
    assert not list((here / FINAL.parent).glob(".v1.storekit-tmp-*"))
    assert verify(capsys).code == 0


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


def test_a_kill_removing_the_old_copy_after_the_commit_is_settled_by_the_next_run(
    here: Path, capsys: Any
) -> None:
    """SIGKILL at durable.tombstoned of a --force replace: the old copy's tombstone
    (`..v1.storekit-tmp-*.storekit-deleting-*`, a full old copy) stayed forever, since the double
    dot missed settle_leftovers' prefix. The new dataset is committed; the next run removes it."""
    old = _prepared_other(capsys, here)
    killed = run_storekit([*BASE, "--force"], cwd=here, env={"STOREKIT_FAULTS": "durable.tombstoned=kill"})
    assert killed.code == -signal.SIGKILL, killed.stderr
    assert (here / FINAL / "manifest.json").read_bytes() != old and verify(capsys).code == 0
    (left,) = (here / FINAL.parent).glob("..v1.storekit-tmp-*.storekit-deleting-*")
    assert (left / "manifest.json").read_bytes() == old  # the whole old copy
    rel = left.relative_to(here / "storage").as_posix()
    assert rel in _findings(capsys)  # reported as a leftover until settled
    again = run_cli(BASE, capsys)
    assert again.code == 0 and again.json()["status"] == "unchanged", again.stderr
    assert not list((here / FINAL.parent).glob(".*.storekit-*")), "the next run settles it"
    assert not [p for p in _findings(capsys) if p.startswith("datasets/")]


def _findings(capsys: Any) -> set[str]:
    doc = run_cli(["layout", "check", "--json"], capsys).json()
    return {f["path"] for tier in doc["tiers"] for f in tier["findings"]}


def test_layout_clean_finishes_the_interrupted_delete_of_the_old_copy(here: Path, capsys: Any) -> None:
    """The same kill, and nobody runs prepare into that path again: `layout clean` looked only at
    scratch/ and left the old copy's tombstone beside the dataset for good. It finishes that delete
    now (not while a run's lease covers it), and the committed dataset is untouched."""
    _prepared_other(capsys, here)
    killed = run_storekit([*BASE, "--force"], cwd=here, env={"STOREKIT_FAULTS": "durable.tombstoned=kill"})
    assert killed.code == -signal.SIGKILL, killed.stderr
    committed = (here / FINAL / "manifest.json").read_bytes()
    (left,) = (here / FINAL.parent).glob("..v1.storekit-tmp-*.storekit-deleting-*")
    rel = left.relative_to(here / "storage").as_posix()
    dry = run_cli(["layout", "clean", "--dry-run", "--json"], capsys)
    assert dry.code == 0, dry.stdout
    assert {e["path"]: e["action"] for e in dry.json()["entries"]}.get(rel) == "delete"
    assert left.exists()
    res = run_cli(["layout", "clean", "--json"], capsys)
    assert res.code == 0, res.stdout
    assert rel in res.json()["deleted"] and not left.exists()
    assert (here / FINAL / "manifest.json").read_bytes() == committed and verify(capsys).code == 0
    assert rel not in _findings(
        capsys
    )  # (the killed run's stale lease is still reported: the next run breaks it)
