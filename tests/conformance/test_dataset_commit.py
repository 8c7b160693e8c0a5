"""The manifest and the dataset commit (pipeline/commit.Staging), on every backend.

POSIX stages in a hidden sibling and renames; S3 writes in place with the manifest last. Either way a
reader sees no dataset until the commit, then the whole dataset, and an abort leaves nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from storekit.errors import InputError, MismatchError, NotFoundError, StorekitError
from storekit.manifest import Manifest, ManifestFile, read_manifest, require_verified, write_manifest
from storekit.ops import hash_file
from storekit.paths import join_rel
from storekit.pipeline.commit import Staging, check_existing
from storekit.pipeline.location import DatasetLocation
from storekit.pipeline.workdir import WorkDir
from storekit.store import TMP_MARK, Store

from .conftest import tree

REL = "datasets/text/demo/v1"
FILES = {"train-00000.bin": b"\x01\x00" * 500, "train-00000.idx": b"MMIDIDX\x00\x00" + b"\x07" * 40}


def _manifest(store: Store, directory: str, plan_id: str) -> Manifest:
    files = []
    for name in sorted(FILES):
        digest = hash_file(store, join_rel(directory, name))
        files.append(ManifestFile(path=name, size=digest.size, xxh3_128=digest.xxh3_128))
    return Manifest(kind="dataset", files=tuple(files), body={"plan_id": plan_id})


def _temp_leftovers(store: Store) -> list[str]:
    return [p for p, _, _ in tree(store, "datasets") if TMP_MARK in p] if store.exists("datasets") else []


def _stage_and_write(store: Store, tmp_path: Path, plan_id: str) -> Staging:
    staging = Staging(DatasetLocation(store, REL, None), WorkDir(tmp_path / "work"), force=False)
    (tmp_path / "work").mkdir(exist_ok=True)
    staging.begin()
    for name, data in FILES.items():
        store.write_bytes(join_rel(staging.rel, name), data)
    return staging


def test_a_manifest_round_trips_and_verifies_the_bytes_it_names(store: Store) -> None:
    for name, data in FILES.items():
        store.write_bytes(join_rel(REL, name), data)
    manifest = _manifest(store, REL, "p1")
    write_manifest(store, REL, manifest)
    back = read_manifest(store, REL)
    assert back.files == manifest.files and back.kind == "dataset" and back.body["plan_id"] == "p1"
    require_verified(store, REL, back)
    store.write_bytes(join_rel(REL, "train-00000.bin"), b"\x02\x00" * 500)  # same size, other bytes
    with pytest.raises(MismatchError, match=r"train-00000\.bin: xxh3-128"):
        require_verified(store, REL, back)


def test_no_manifest_is_not_found_and_a_broken_one_names_itself(store: Store) -> None:
    store.write_bytes(join_rel(REL, "train-00000.bin"), b"x")
    with pytest.raises(NotFoundError, match=r"no manifest\.json"):
        read_manifest(store, REL)
    store.write_bytes(join_rel(REL, "manifest.json"), b"{not json")
    with pytest.raises(InputError, match=r"manifest\.json: not a valid manifest"):
        read_manifest(store, REL)


def test_the_dataset_appears_only_at_the_commit_and_whole(store: Store, tmp_path: Path) -> None:
    staging = _stage_and_write(store, tmp_path, "p1")
    write_manifest(store, staging.rel, _manifest(store, staging.rel, "p1"))
    if staging.atomic_rename:  # nothing at the final name until the rename
        assert not store.exists(REL)
    staging.commit("p1")
    committed = read_manifest(store, REL)
    require_verified(store, REL, committed)
    names = sorted(p for p, is_dir, _ in tree(store, REL) if not is_dir)
    assert names == sorted([f"{REL}/{n}" for n in FILES] + [f"{REL}/manifest.json"])
    assert _temp_leftovers(store) == []
    # the same plan again is this very dataset; another plan is refused without --force
    location = DatasetLocation(store, REL, None)
    assert check_existing(location, "p1", force=False, work=None) == committed
    with pytest.raises(StorekitError, match="already holds a different dataset"):
        check_existing(location, "p2", force=False, work=None)


def test_an_aborted_commit_leaves_no_dataset_and_no_temp_files(store: Store, tmp_path: Path) -> None:
    staging = _stage_and_write(store, tmp_path, "p1")
    staging.abort()
    assert not store.exists(REL) or not tree(store, REL)
    assert _temp_leftovers(store) == []
    with pytest.raises(NotFoundError):
        read_manifest(store, REL)
