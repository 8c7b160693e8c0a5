"""Size + xxh3-128 of a stream: the one digest loop (copies, manifests, checkpoint stages, tiering).

Only the standard library and xxhash: a training script's `checkpoint.commit` imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import xxhash

CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class FileDigest:
    size: int
    xxh3_128: str  # lowercase hex


def hash_stream(read: Callable[[int], bytes], chunk: int = CHUNK) -> FileDigest:
    h = xxhash.xxh3_128()
    size = 0
    while block := read(chunk):
        h.update(block)
        size += len(block)
    return FileDigest(size=size, xxh3_128=h.hexdigest())


def hash_bytes(data: bytes) -> FileDigest:
    return FileDigest(size=len(data), xxh3_128=xxhash.xxh3_128_hexdigest(data))
