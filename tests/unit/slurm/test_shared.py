"""Node-local paths are refused before submitting: burst tiers, tmpfs, local disks."""

from __future__ import annotations

from pathlib import Path

import pytest

from storekit.config import SiteConfig, TierConfig
from storekit.errors import ExitCode, StorekitError
from storekit.mounts import parse_mountinfo
from storekit.slurm.shared import all_on_this_host, fs_type, node_local_reason, refuse_node_local

MOUNTINFO = r"""22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:26 / /tmp rw,nosuid shared:5 - tmpfs tmpfs rw
31 22 0:40 / /lustre rw,relatime shared:9 - lustre 10.0.0.1@tcp:/fs rw
32 22 0:41 / /home rw,relatime shared:10 - nfs4 nas:/home rw
33 22 259:1 / /scratch\040local rw,relatime shared:11 - xfs /dev/nvme0n1 rw
"""
TABLE = parse_mountinfo(MOUNTINFO)


def test_the_deepest_mount_decides_the_type() -> None:
    assert fs_type("/lustre/storage/datasets", TABLE) == "lustre"
    assert fs_type("/home/alice/tok.json", TABLE) == "nfs4"
    assert fs_type("/tmp/x", TABLE) == "tmpfs"
    assert fs_type("/scratch local/job", TABLE) == "xfs"
    assert fs_type("/opt", TABLE) == "ext4"


@pytest.mark.parametrize(
    ("path", "single_host", "local"),
    [
        ("/lustre/storage", False, False),
        ("/home/alice", False, False),
        ("/tmp/work", False, True),
        ("/tmp/work", True, True),  # tmpfs is never shared, even between emulated nodes
        ("/scratch local/w", False, True),
        ("/scratch local/w", True, False),  # every node is this host: its disk is shared
    ],
)
def test_shared_and_node_local_file_systems(path: str, single_host: bool, local: bool) -> None:
    assert (node_local_reason(path, None, single_host=single_host, table=TABLE) is not None) is local


@pytest.mark.parametrize("name", ["nvme", "local nvme"])  # a space: the tier URL holds %20
def test_a_burst_tier_is_node_local_whatever_its_file_system(tmp_path: Path, name: str) -> None:
    nvme = tmp_path / name
    nvme.mkdir()
    site = SiteConfig(
        source="test",
        tiers={"nvme": TierConfig(name="nvme", url=nvme.as_uri(), role="burst")},
        default_tier="nvme",
    )
    with pytest.raises(StorekitError) as info:
        refuse_node_local([("work dir", str(nvme / "scratch" / "w"))], site, single_host=True)
    assert info.value.exit_code == ExitCode.USAGE
    assert "burst tier" in info.value.message and str(nvme / "scratch" / "w") in info.value.message
    refuse_node_local([("work dir", str(tmp_path / "other"))], site, single_host=True)  # not on the tier


def test_emulated_nodes_are_recognised_by_their_loopback_addresses() -> None:
    assert all_on_this_host(["127.0.0.1", "127.0.0.1", "localhost"])
    assert not all_on_this_host(["127.0.0.1", "10.0.0.7"])
    assert not all_on_this_host([])
