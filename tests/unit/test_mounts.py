"""The one reader of /proc/self/mountinfo (store capabilities, bench environment, Slurm node-local check)."""

from __future__ import annotations

from storekit.mounts import deepest_mount, mount_of, mount_table, parse_mountinfo

TABLE = parse_mountinfo(
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "40 22 0:50 / /données\\040partagées rw,relatime shared:9 - lustre 10.0.0.1@tcp:/fs rw,flock\n"
    "41 22 0:51 / /sk-test-scratch rw - tmpfs tmpfs rw\n"
    "42 41 0:52 / /sk-test-scratch rw - xfs /dev/nvme0n1 rw\n"
    "not a mountinfo line\n"
)


def test_escapes_are_decoded_and_other_bytes_kept() -> None:
    lustre = deepest_mount("/données partagées/run", TABLE)
    assert lustre is not None and lustre.point == "/données partagées"
    assert (lustre.fs_type, lustre.source, lustre.options, lustre.super_options, lustre.dev) == (
        "lustre",
        "10.0.0.1@tcp:/fs",
        "rw,relatime",
        "rw,flock",
        "0:50",
    )


def test_the_deepest_and_last_mounted_point_wins() -> None:
    assert [m.fs_type for m in TABLE] == ["ext4", "lustre", "tmpfs", "xfs"]
    assert deepest_mount("/sk-test-scratch/x", TABLE).fs_type == "xfs"  # type: ignore[union-attr]
    assert deepest_mount("/sk-test-nowhere", TABLE).fs_type == "ext4"  # type: ignore[union-attr]
    assert deepest_mount("/sk-test-nowhere", []) is None


def test_an_unreadable_table_knows_nothing() -> None:
    assert mount_table("/nonexistent/mountinfo") == []
    assert mount_of("/", "/nonexistent/mountinfo") is None
    root = mount_of("/")
    assert root is not None and root["mount_point"] == "/" and set(root) >= {"fs_type", "mount_options"}
