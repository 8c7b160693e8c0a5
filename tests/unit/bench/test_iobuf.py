"""I/O buffers: aligned, random, on huge pages where the kernel allows, and honest about it."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest

from storekit.bench import env, iobuf
from storekit.bench.engine_posix import SeqRead
from storekit.bench.iobuf import HUGE_PAGE, SMALL_PAGES, IOBuffer, huge_bytes
from storekit.bench.plan import WorkerTask
from storekit.bench.spec import TargetSpec

MiB = 1 << 20


@pytest.mark.parametrize("size", [100, 4096, MiB, 3 * MiB])
def test_a_buffer_is_aligned_random_and_writable(size: int) -> None:
    a, b = IOBuffer(size, seed=1), IOBuffer(size, seed=2)
    try:
        assert len(a.view) == a.size == max(size, 4096)
        assert a.address % mmap.PAGESIZE == 0
        if hasattr(mmap, "MADV_HUGEPAGE"):
            assert a.address % HUGE_PAGE == 0
        assert len(np.unique(np.frombuffer(bytes(a.view), dtype=np.uint8))) > 200  # random, not a pattern
        assert bytes(a.view) != bytes(b.view)
        a.view[:4] = b"\x00\x01\x02\x03"
        assert bytes(a.view[:4]) == b"\x00\x01\x02\x03"
    finally:
        a.close()
        b.close()


def test_buffers_sit_on_huge_pages_wherever_the_kernel_offers_them() -> None:
    mode = env.transparent_hugepages()
    buf = IOBuffer(MiB, seed=3)
    try:
        if mode in ("always", "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
            assert buf.huge, "a 1 MiB buffer should be one 2 MiB huge page"
            assert huge_bytes(buf.address, buf.size) >= HUGE_PAGE
        elif mode == "never":
            assert not buf.huge
    finally:
        buf.close()


def test_huge_bytes_reads_the_mapping_that_holds_the_buffer(tmp_path: Path) -> None:
    smaps = tmp_path / "smaps"
    smaps.write_text(
        "7f0000000000-7f0000200000 rw-p 00000000 00:00 0\n"
        "Size:               2048 kB\nAnonHugePages:         0 kB\n"
        "7f0000400000-7f0000a00000 rw-p 00000000 00:00 0\n"
        "Size:               6144 kB\nAnonHugePages:      4096 kB\nVmFlags: rd wr mr mw me ac hg\n"
    )
    assert huge_bytes(0x7F0000400000, MiB, str(smaps)) == 4096 * 1024
    assert huge_bytes(0x7F0000000000, MiB, str(smaps)) == 0
    assert huge_bytes(0x7F0000300000, 4096, str(smaps)) == 0  # in no mapping
    assert huge_bytes(0x7F0000900000, 2 * MiB, str(smaps)) == 0  # runs past the mapping's end
    assert huge_bytes(0x7F0000400000, MiB, str(tmp_path / "missing")) == 0


def test_a_worker_without_huge_pages_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(iobuf, "huge_bytes", lambda address, size: 0)  # as with THP set to never
    (tmp_path / "s.bin").write_bytes(b"x" * MiB)
    task = WorkerTask(worker=0, op="read", target=TargetSpec(kind="posix", root=str(tmp_path)),
                      run_root=str(tmp_path), files=("s.bin",), file_size=MiB, block_size=MiB)  # fmt: skip
    job = SeqRead(task)
    job.close()
    assert job.notes == [SMALL_PAGES]


def test_the_environment_names_the_queue_limits_that_split_requests() -> None:
    mount = env.mount_of("/")
    device = env.block_device(mount["dev"]) if mount else None
    if device is None:
        pytest.skip("/ is not on a block device here")
    queue = Path("/sys/block") / device["name"] / "queue"
    for key in ("max_segments", "max_sectors_kb"):
        expected = int((queue / key).read_text()) if (queue / key).exists() else None
        assert device[key] == expected


def test_transparent_hugepages_mode_is_the_bracketed_word(tmp_path: Path) -> None:
    knob = tmp_path / "enabled"
    knob.write_text("always [madvise] never\n")
    assert env.transparent_hugepages(str(knob)) == "madvise"
    assert env.transparent_hugepages(str(tmp_path / "absent")) is None
