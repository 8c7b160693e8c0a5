"""Two nodes on one shared file system: the real CephFS mounted twice (two ceph-fuse clients, as two
nodes mount it). Where two actors meet (a lease, one dataset path, a rename) one acts through the first
mount and the other through the second. Interleavings come from fault points, never from timing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from storekit import faults
from storekit.config import TierConfig
from storekit.errors import BusyError
from storekit.lease import Lease, binding_lease, dir_lease_path
from storekit.store import open_store
from tests.conftest import TwoMounts, run_cli
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl

pytestmark = pytest.mark.cephfs


def test_a_lease_held_on_one_node_binds_on_the_other(cephfs: TwoMounts) -> None:
    work = "job"
    (cephfs.one / work).mkdir()
    with Lease(dir_lease_path(cephfs.one / work), purpose="using the work dir") as held:
        seen = binding_lease(dir_lease_path(cephfs.two / work))
        assert seen is not None and seen.token == held.token and seen.pid == os.getpid()
        with pytest.raises(BusyError) as refused:
            Lease(dir_lease_path(cephfs.two / work), purpose="using the work dir").acquire()
        assert f"pid {os.getpid()}" in refused.value.message
        held.renew()  # the heartbeat's rewrite (temp + rename) is seen whole on the other node
        assert binding_lease(dir_lease_path(cephfs.two / work)).token == held.token  # type: ignore[union-attr]
    assert binding_lease(dir_lease_path(cephfs.two / work)) is None
    with Lease(dir_lease_path(cephfs.two / work), purpose="using the work dir") as second:
        assert binding_lease(dir_lease_path(cephfs.one / work)).token == second.token  # type: ignore[union-attr]


def test_a_rename_is_atomic_across_nodes(cephfs: TwoMounts) -> None:
    """A reader on node two sees the old bytes or the new, never a mix: what it opened before the
    rename on node one stays the old file; what it opens after is the new one, whole."""
    tier = lambda root: TierConfig(name="shared", url=(root / "storage").as_uri(), role="plain")  # noqa: E731
    one, two = open_store(tier(cephfs.one)), open_store(tier(cephfs.two))
    one.makedirs("")
    old, new = b"o" * 3_000_000, bytes(range(256)) * 12_000
    one.write_bytes("shard.bin", old)
    with two.open_read("shard.bin") as before:
        with one.atomic_writer("shard.bin") as fh:
            fh.write(new[: len(new) // 2])
            assert two.read_bytes("shard.bin") == old  # the half-written temp is not visible
            fh.write(new[len(new) // 2 :])
        assert before.read() == old
    assert two.read_bytes("shard.bin") == new
    assert [e.path for e in two.list("")] == ["shard.bin"]  # no temp left on either node


PREPARE = ["prepare", "dataset", "--tokenizer", TOKENIZER, "--name", "cn", "-i", "corpus.jsonl"]
PREPARE += ["--json", "--quiet", "--workers", "1", "--shard-size", "8KiB", "--task-size", "8KiB"]


@pytest.mark.slow  # ~9 s: every task's commit is a cross-client metadata round trip
def test_concurrent_prepares_from_two_nodes_one_wins(
    cephfs: TwoMounts, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node one's run is held just before its commit; node two's run into the same dataset path
    exits 5 naming the holder; node one commits a dataset node two reads back verified."""
    write_jsonl(cephfs.one / "corpus.jsonl", sample_records(limit_bytes=16_000, max_doc=4_000))
    seen: list[tuple[int, str]] = []

    def node_two() -> None:
        if seen:
            return
        monkeypatch.chdir(cephfs.two)
        ran = run_cli([*PREPARE, "--min-chars", "2"])
        monkeypatch.chdir(cephfs.one)
        seen.append((ran.code, ran.stderr))

    monkeypatch.chdir(cephfs.one)
    with faults.at("commit.before-rename", node_two):
        first = run_cli(PREPARE, capsys)
    assert first.code == 0, first.stderr
    code, err = seen[0]
    assert code == 5, err
    assert "another storekit process is writing the dataset" in err and f"pid {os.getpid()}" in err
    final = Path("storage/datasets/text/cn/v1")
    manifest = json.loads((cephfs.two / final / "manifest.json").read_bytes())
    assert manifest["plan_id"] == first.json()["plan"]["plan_id"]
    monkeypatch.chdir(cephfs.two)
    assert run_cli(["dataset", "verify", "datasets/text/cn/v1", "--json"], capsys).code == 0
    assert not list((cephfs.two / final).parent.glob(".v1.storekit-*"))  # no lease, no staging left
