"""Upload parts sent straight from the page cache: a read-only map of the part, no copy into a buffer.

Copying each 64 MiB part from the page cache into a part buffer was a third of an upload's client
CPU (perf, 2026-11-25), and the buffers' first use faulted in every page. Here each part is mapped
and the sending thread hands botocore a file-like over the map whose reads are slices of it:
http.client passes them to `sendall`, which copies page cache to socket once. A part is unmapped
after it is sent, and only then can `fadvise DONTNEED` drop it (mapped pages are skipped).

The reading thread hashes the part from a small reused buffer filled by pread (cache-hot), not
through the map: a page lost to a truncation would be a SIGBUS there, while in `sendall` it is an
EFAULT, an error of that part. Hashing through the map measured ~0.07 CPU-s/GB less (A/B, loaded
host), not worth a crash on a truncated source.
"""

from __future__ import annotations

import contextlib
import mmap
import threading

MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux: fill the page tables in one call


class MappedPart:
    """`length` bytes of `fd` at `offset`, mapped read-only; `close()` unmaps (after the send)."""

    def __init__(self, fd: int, offset: int, length: int) -> None:
        pad = offset % mmap.ALLOCATIONGRANULARITY  # a part size above 64 MiB need not be page-aligned
        self._map = mmap.mmap(
            fd, pad + length, flags=mmap.MAP_SHARED | MAP_POPULATE, prot=mmap.PROT_READ, offset=offset - pad
        )
        self.view = memoryview(self._map)[pad : pad + length]
        self.length = length
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.length

    def body(self) -> PartBody:
        return PartBody(self.view)

    def close(self) -> None:
        with self._lock:
            if self._map.closed:
                return
            self.view.release()
            with contextlib.suppress(BufferError):  # a slice still held: unmapped when it is dropped
                self._map.close()


class PartBody:
    """A request body over a mapped part: botocore takes any object with `read` (a memoryview it
    refuses), knows its length from `len`, and rewinds it with `seek` before a resend."""

    SLICE = 8 * 1024 * 1024  # per `sendall`: large enough that Python's per-call cost vanishes

    def __init__(self, view: memoryview) -> None:
        self._view = view
        self._pos = 0

    def __len__(self) -> int:
        return len(self._view)

    def read(self, n: int = -1) -> memoryview | bytes:
        # http.client and urllib3 ask for 8-16 KiB at a time; a larger slice costs nothing more
        end = len(self._view) if n is None or n < 0 else min(len(self._view), self._pos + max(n, self.SLICE))
        if self._pos >= end:
            return b""
        out = self._view[self._pos : end]
        self._pos = end
        return out

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: len(self._view)}[whence]
        self._pos = max(0, min(len(self._view), base + pos))
        return self._pos

    def tell(self) -> int:
        return self._pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True
