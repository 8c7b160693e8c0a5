"""The tier's Destination, every operation a move uses (copy with its read-back, commit, manifest,
fetch, readback, discard, stamp, uncommit), on each backend a unit is moved to: a local directory,
the no-xattr ramfs, the real Ceph RGW (archive) and the real CephFS (drain)."""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import xxhash

from storekit import faults
from storekit.config import TierConfig
from storekit.digest import CHUNK
from storekit.errors import MismatchError
from storekit.manifest import UnitEntry, UnitManifest
from storekit.store import Store, open_store
from storekit.store.s3delete import list_keys
from storekit.tier.dest import Destination, PosixDestination, S3Destination, materialize, open_destination
from storekit.tier.unitwalk import walk_unit
from tests.conftest import TwoMounts

DESTINATIONS = [
    "local",
    "noxattr",
    pytest.param("s3", marks=pytest.mark.ceph),
    pytest.param("cephfs", marks=pytest.mark.cephfs),
]
UNIT = "runs/run_001"
FILES = {  # more than one read chunk, an empty file, a nested one
    "model.bin": os.urandom(CHUNK + 4099),
    "empty": b"",
    "sub/deep/config.json": b'{"lr": 0.1}\n',
}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """The unit on the fast tier: files, a nested directory, a symlink, modes and mtimes set."""
    root = tmp_path / "fast" / UNIT
    for rel, data in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "latest").symlink_to("model.bin")
    os.chmod(root / "sub/deep/config.json", 0o600)
    os.utime(root / "model.bin", ns=(1_600_000_000_123_456_789, 1_600_000_000_123_456_789))
    return root


@pytest.fixture(params=DESTINATIONS)
def make_dest(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Destination]]:
    """Destinations for the unit on one backend; each call is another move (another temp tag)."""
    made: list[Destination] = []
    if request.param == "s3":
        tier: TierConfig = request.getfixturevalue("s3_tier")
    else:
        if request.param == "local":
            root = tmp_path / "slow"
        elif request.param == "noxattr":
            root = request.getfixturevalue("ramfs") / f"t-{uuid.uuid4().hex[:12]}"
        else:
            shared: TwoMounts = request.getfixturevalue("cephfs")
            root = shared.one / "slow"
        tier = TierConfig(name="slow", url=root.as_uri())
    store: Store = open_store(tier)  # the tier's one store: every destination is built from it

    def make() -> Destination:
        made.append(open_destination(store, UNIT, temp_tag=uuid.uuid4().hex[:8]))
        return made[-1]

    yield make
    for dest in made:
        dest.close()


def with_digests(entries: list[UnitEntry], digests: dict[str, str]) -> list[UnitEntry]:
    return [dataclasses.replace(e, xxh3_128=digests.get(e.path, "")) for e in entries]


def copied(dest: Destination, source: Path) -> UnitManifest:
    """The unit copied to `dest` as a move does (read back, not committed); its manifest."""
    entries = walk_unit(source)
    reported: dict[str, str] = {}
    digests = dest.copy(source, entries, reported.update)
    assert digests == reported == {rel: xxhash.xxh3_128_hexdigest(data) for rel, data in FILES.items()}
    return UnitManifest(unit=UNIT, source=source.as_uri(), entries=with_digests(entries, digests))


def shape(entries: list[UnitEntry]) -> list[tuple[object, ...]]:
    """What a copy and a recall must keep of each entry (owners: the test runs as one user)."""
    return sorted((e.path, e.type, e.mode, e.mtime_ns, e.size, e.target) for e in entries)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {rel: (root / rel).read_bytes() for rel in FILES}


def overwrite(dest: Destination, rel: str, data: bytes) -> None:
    """Change a file of the copy behind the destination's back (bit rot, another writer)."""
    if isinstance(dest, S3Destination):
        dest.engine.client.put_object(Bucket=dest.engine.bucket, Key=dest.key(rel), Body=data)
        return
    assert isinstance(dest, PosixDestination)
    base = dest.temp if dest.temp.exists() else dest.dest
    (base / rel).write_bytes(data)


def remove(dest: Destination, rel: str) -> None:
    if isinstance(dest, S3Destination):
        dest.engine.client.delete_object(Bucket=dest.engine.bucket, Key=dest.key(rel))
        return
    assert isinstance(dest, PosixDestination)
    (dest.dest / rel).unlink()


def test_copy_commit_fetch_round_trip(
    make_dest: Callable[[], Destination], source: Path, tmp_path: Path
) -> None:
    dest = make_dest()
    dest.precheck()
    manifest = copied(dest, source)
    assert dest.manifest() is None  # copied and read back, but nothing vouches for it yet
    data = manifest.to_json()
    dest.commit(data)
    assert dest.manifest() == data
    assert dest.readback(manifest.files) == []
    # the copy is where the tier's store sees it: every file and the manifest, under the store's root
    assert dest.store.read_bytes(f"{UNIT}.storekit-archive.json") == data
    assert {rel: dest.store.read_bytes(f"{UNIT}/{rel}") for rel in FILES} == FILES
    if isinstance(dest, PosixDestination):  # the tree itself: modes, mtimes, the link, the bytes
        assert not dest.temp.exists()
        assert shape(walk_unit(dest.dest)) == shape(manifest.entries)
        assert tree_bytes(dest.dest) == FILES
    back = tmp_path / "recalled"  # a recall (another process: a fresh destination) rebuilds the tree
    materialize(manifest.entries, back, make_dest().fetch)
    assert shape(walk_unit(back)) == shape(manifest.entries)
    assert tree_bytes(back) == FILES and os.readlink(back / "latest") == "model.bin"


def test_readback_names_what_differs_and_what_is_missing(
    make_dest: Callable[[], Destination], source: Path
) -> None:
    dest = make_dest()
    manifest = copied(dest, source)
    dest.commit(manifest.to_json())
    stamp = dest.stamp(manifest.files)
    assert dest.stamp(manifest.files) == stamp  # nothing rewritten: the same stamp, no byte read
    bad = bytearray(FILES["model.bin"])
    bad[CHUNK] ^= 0xFF  # same size, one byte in the second chunk
    overwrite(dest, "model.bin", bytes(bad))
    remove(dest, "sub/deep/config.json")
    problems = dest.readback(manifest.files)
    want = xxhash.xxh3_128_hexdigest(FILES["model.bin"])
    found = xxhash.xxh3_128_hexdigest(bytes(bad))
    assert len(problems) == 2, problems
    assert problems[0].endswith(
        f"/{UNIT}/model.bin: expected {CHUNK + 4099} bytes xxh3-128 {want}, "
        f"found {CHUNK + 4099} bytes xxh3-128 {found}"
    )
    assert problems[1].endswith(f"/{UNIT}/sub/deep/config.json: missing")
    assert dest.stamp(manifest.files) != stamp


def test_fetch_of_a_damaged_copy_is_refused(
    make_dest: Callable[[], Destination], source: Path, tmp_path: Path
) -> None:
    dest = make_dest()
    manifest = copied(dest, source)
    dest.commit(manifest.to_json())
    overwrite(dest, "sub/deep/config.json", b'{"lr": 0.2}\n')
    files = [(f, str(tmp_path / f"fetched-{i}")) for i, f in enumerate(manifest.files)]
    with pytest.raises(MismatchError) as info:
        make_dest().fetch(files)
    assert info.value.exit_code == 4 and f"{UNIT}/sub/deep/config.json: expected" in str(info.value)


def test_a_copy_changed_on_the_destination_fails_its_read_back(
    make_dest: Callable[[], Destination], source: Path
) -> None:
    """Each file is read back from the destination as it lands: bytes that are not what was read
    from the source stop the copy (exit 4), and nothing is committed."""
    dest = make_dest()
    changed: list[str] = []

    def meddle() -> None:  # the first file just landed, its read-back not started yet
        if not changed:
            changed.append("model.bin")
            data = bytearray(FILES["model.bin"])
            data[0] ^= 1
            overwrite(dest, "model.bin", bytes(data))

    entries = [e for e in walk_unit(source) if e.path in (".", "model.bin")]
    with faults.at("tier.file-copied", meddle), pytest.raises(MismatchError) as info:
        dest.copy(source, entries, lambda digests: None)
    assert info.value.exit_code == 4 and "model.bin: expected" in str(info.value)
    assert dest.manifest() is None


def test_discard_removes_an_uncommitted_copy(make_dest: Callable[[], Destination], source: Path) -> None:
    dest = make_dest()
    manifest = copied(dest, source)
    assert dest.discard(manifest.files) == []
    assert dest.manifest() is None
    if isinstance(dest, S3Destination):
        assert list(list_keys(dest.engine, f"{dest.base}/")) == []
    else:
        assert isinstance(dest, PosixDestination)
        assert not dest.temp.exists() and not dest.dest.exists()
        assert not dest.dest.parent.exists()  # the run directory this copy made went too


def test_uncommit_and_clear(make_dest: Callable[[], Destination], source: Path) -> None:
    dest = make_dest()
    data = copied(dest, source).to_json()
    dest.commit(data)
    dest.uncommit()  # the manifest goes first: from then on no reader takes the copy as complete
    assert dest.manifest() is None
    dest.uncommit()  # nothing left to uncommit: not an error
    dest.commit(data)  # the copy is still there: committing it again is what a resumed move does
    assert dest.manifest() == data
    again = make_dest()  # the next move of the unit, before it copies anything
    again.clear()
    assert again.manifest() is None and dest.manifest() is None
