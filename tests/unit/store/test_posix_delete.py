"""PosixStore.delete of a directory goes through a tombstone: a SIGKILL after the rename leaves the
whole tree under a tombstone name (never a half-deleted tree under its own), which layout clean and
purge_tombstones remove; neighbours are never touched."""

from __future__ import annotations

from pathlib import Path

from storekit.config import TierConfig
from storekit.durable import is_tombstone, purge_tombstones
from storekit.store import open_store
from tests.unit.tier.helpers import run_killed, snapshot


def test_a_kill_mid_delete_leaves_the_whole_tree_in_a_tombstone(tmp_path: Path) -> None:
    store = open_store(TierConfig(name="t", url=(tmp_path / "root").as_uri(), role="plain"))
    for rel in ("ds/v1/shard_0.bin", "ds/v1/sub/shard_1.bin", "ds/v1.txt", "ds/v10/keep"):
        store.write_bytes(rel, rel.encode() * 100)
    before = snapshot(tmp_path / "root/ds/v1")
    neighbours = {rel: store.read_bytes(rel) for rel in ("ds/v1.txt", "ds/v10/keep")}

    assert run_killed(lambda: store.delete("ds/v1", recursive=True), "durable.tombstoned=kill")
    assert not store.exists("ds/v1")  # gone from its name in one step
    (tomb,) = [p for p in (tmp_path / "root/ds").iterdir() if is_tombstone(p.name)]
    assert snapshot(tomb) == before  # whole, nothing deleted before the rename was durable
    assert {rel: store.read_bytes(rel) for rel in neighbours} == neighbours
    assert purge_tombstones(tmp_path / "root/ds") == [tomb.name]

    store.write_bytes("ds/v2/a", b"a")
    store.delete("ds/v2", recursive=True)  # uninterrupted: no tombstone left behind
    assert sorted(p.name for p in (tmp_path / "root/ds").iterdir()) == ["v1.txt", "v10"]
