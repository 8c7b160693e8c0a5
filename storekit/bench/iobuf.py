"""I/O buffers for O_DIRECT: aligned anonymous memory, on transparent huge pages where the kernel gives them.

Why huge pages: a direct-I/O request is split when its buffer has more discontiguous pages than the
device queue's max_segments (254 on virtio-blk), so a 1 MiB write from scattered 4 KiB pages reaches
the disk as two requests, and one from a contiguous buffer as one. Which of the two a 4 KiB-page
buffer gets depends on the page allocator's mood: measured on this project's VM, fio's malloc'd
buffer gave 2 requests per 1 MiB and ~400 MB/s, the same writes from a huge page 1 request and
~890 MB/s. A benchmark must not measure that luck, so buffers are 2 MiB-aligned and advised
MADV_HUGEPAGE, and whether they really are huge is read back from /proc/self/smaps and reported.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap

import numpy as np

from storekit.bench.spec import DIRECT_ALIGN

HUGE_PAGE = 2 << 20
SMALL_PAGES = (
    "I/O buffers are on 4 KiB pages (transparent huge pages unavailable): requests larger than "
    "the device's max_segments x 4 KiB may be split"
)


class IOBuffer:
    """`size` bytes of random data at a page-aligned `address`; `view` is a writable memoryview."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = max(size, DIRECT_ALIGN)
        want_huge = hasattr(mmap, "MADV_HUGEPAGE")
        span = -(-self.size // mmap.PAGESIZE) * mmap.PAGESIZE
        if want_huge:  # room to start on a 2 MiB boundary and end on one
            span = -(-self.size // HUGE_PAGE) * HUGE_PAGE + HUGE_PAGE
        # private: a shared anonymous map is shmem, whose huge pages follow shmem_enabled instead
        self._mm = mmap.mmap(-1, span, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self._mm))
        self.offset = (-base) % HUGE_PAGE if want_huge else 0
        if want_huge:
            with contextlib.suppress(OSError):  # advice only: a kernel without THP says EINVAL
                self._mm.madvise(mmap.MADV_HUGEPAGE, self.offset, span - self.offset)
        self.address = base + self.offset
        self.view = memoryview(self._mm)[self.offset : self.offset + self.size]
        rng = np.random.default_rng(seed)  # random: compression or dedup in the storage can't flatter it
        np.frombuffer(self.view, dtype=np.uint8)[:] = rng.integers(0, 256, size=self.size, dtype=np.uint8)
        self.huge = (
            want_huge and huge_bytes(self.address, self.size) >= -(-self.size // HUGE_PAGE) * HUGE_PAGE
        )

    def close(self) -> None:
        self.view.release()
        self._mm.close()


def huge_bytes(address: int, size: int, smaps: str = "/proc/self/smaps") -> int:
    """AnonHugePages of the mapping holding [address, address+size), 0 when unknown."""
    try:
        with open(smaps) as fh:
            inside = False
            for line in fh:
                head = line.split(None, 1)[0]
                if "-" in head and not head.endswith(":"):
                    lo, hi = (int(x, 16) for x in head.split("-"))
                    inside = lo <= address and address + size <= hi
                elif inside and head == "AnonHugePages:":
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return 0
    return 0
