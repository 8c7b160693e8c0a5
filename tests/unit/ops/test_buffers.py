"""The transfer engine's range buffers: their pages are made when the buffer is, not faulted in one by
one as a response body fills it."""

from __future__ import annotations

import mmap

import pytest

from storekit.ops.s3engine import anonymous_map

MiB = 1024 * 1024


def resident_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * mmap.PAGESIZE


@pytest.mark.skipif(not hasattr(mmap, "MAP_POPULATE"), reason="MAP_POPULATE is Linux's")
def test_a_range_buffer_is_resident_as_soon_as_it_is_made() -> None:
    before = resident_bytes()
    buf = anonymous_map(32 * MiB)
    try:
        assert resident_bytes() - before >= 31 * MiB
        assert buf[:4] == b"\0\0\0\0" and len(buf) == 32 * MiB  # zeroed, writable, private
        buf[:1] = b"x"
        assert buf[:2] == b"x\0"
    finally:
        buf.close()
