"""Writing final shards: a series per split, rolled over at the target size, documents never cut.

Each shard's `.bin` is streamed through the store (temp+rename on POSIX, multipart on S3) and hashed
in the same pass; its `.idx` follows, streamed from a lengths file in the work dir, so memory does not
grow with the shard.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import xxhash

from storekit.ops import FileDigest
from storekit.paths import join_rel
from storekit.pipeline.indexed import iter_index_chunks
from storekit.store import Store


@dataclass(frozen=True)
class ShardInfo:
    split: str
    name: str  # file prefix, e.g. train-00000 (Megatron's --data-path takes DIR/train-00000)
    documents: int
    tokens: int
    bin: FileDigest
    idx: FileDigest
    meta: FileDigest | None

    def files(self) -> list[tuple[str, FileDigest]]:
        out = [(f"{self.name}.bin", self.bin), (f"{self.name}.idx", self.idx)]
        if self.meta is not None:
            out.append((f"{self.name}.meta.jsonl", self.meta))
        return out

    def manifest_entry(self) -> dict[str, Any]:
        return {
            "split": self.split,
            "name": self.name,
            "bin": f"{self.name}.bin",
            "idx": f"{self.name}.idx",
            "meta": f"{self.name}.meta.jsonl" if self.meta else None,
            "bytes": self.bin.size,
            "tokens": self.tokens,
            "documents": self.documents,
            "xxh3_128": self.bin.xxh3_128,
            "idx_xxh3_128": self.idx.xxh3_128,
        }


class _HashingWriter:
    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.hash = xxhash.xxh3_128()
        self.size = 0

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")  # sizes in bytes, whatever the array's item type
        self.fh.write(view)
        self.hash.update(view)
        self.size += view.nbytes

    def digest(self) -> FileDigest:
        return FileDigest(size=self.size, xxh3_128=self.hash.hexdigest())


class ShardWriter:
    def __init__(
        self, store: Store, directory: str, name: str, split: str, dtype: str, scratch: Path, with_meta: bool
    ) -> None:
        self.store, self.directory, self.name, self.split, self.dtype = store, directory, name, split, dtype
        self.documents = 0
        self.tokens = 0
        self._stack = contextlib.ExitStack()
        self._bin = _HashingWriter(self._stack.enter_context(store.atomic_writer(self._rel(".bin"))))
        self._meta = (
            _HashingWriter(self._stack.enter_context(store.atomic_writer(self._rel(".meta.jsonl"))))
            if with_meta
            else None
        )
        self._lengths_path = scratch / f"{split}-{name}.lengths"
        self._lengths = open(self._lengths_path, "wb")  # noqa: SIM115 -- closed in close()/abort()

    def _rel(self, suffix: str) -> str:
        return join_rel(self.directory, self.name + suffix)

    def add(self, tokens: np.ndarray, lengths: np.ndarray, metas: Sequence[bytes] | None) -> None:
        self._bin.write(np.ascontiguousarray(tokens).data)
        self._lengths.write(np.ascontiguousarray(lengths, dtype=np.int32).tobytes())
        if self._meta is not None and metas is not None:
            self._meta.write(b"".join(metas))
        self.documents += len(lengths)
        self.tokens += int(tokens.size)

    def close(self) -> ShardInfo:
        self._lengths.close()
        with self._stack:
            pass  # commits .bin (and .meta.jsonl): they now exist under their final names
        with self.store.atomic_writer(self._rel(".idx")) as fh:
            idx = _HashingWriter(fh)
            for chunk in iter_index_chunks(self.dtype, self._lengths_path, self.documents):
                idx.write(chunk)
        os.unlink(self._lengths_path)
        return ShardInfo(
            split=self.split,
            name=self.name,
            documents=self.documents,
            tokens=self.tokens,
            bin=self._bin.digest(),
            idx=idx.digest(),
            meta=self._meta.digest() if self._meta is not None else None,
        )

    def abort(self) -> None:
        self._lengths.close()
        with contextlib.suppress(Exception):
            self._stack.__exit__(RuntimeError, RuntimeError("aborted"), None)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._lengths_path)


class ShardSeries:
    """Shards of one split: documents in order, a new shard when the next document would not fit."""

    def __init__(self, split: str, limit_tokens: int, open_shard: Callable[[str, str], ShardWriter]) -> None:
        self.split = split
        self.limit = limit_tokens
        self.open_shard = open_shard
        self.current: ShardWriter | None = None
        self.closed: list[ShardInfo] = []
        self.on_close: Callable[[ShardInfo], None] | None = None

    def add(self, tokens: np.ndarray, lengths: np.ndarray, metas: Sequence[bytes] | None) -> None:
        n = len(lengths)
        cum = np.cumsum(lengths, dtype=np.int64)
        pos = 0
        while pos < n:
            if self.current is None:
                self.current = self.open_shard(self.split, f"{self.split}-{len(self.closed):05d}")
            base = int(cum[pos - 1]) if pos else 0
            room = self.limit - self.current.tokens
            end = int(np.searchsorted(cum, base + room, side="right"))
            if end <= pos:
                if self.current.documents:
                    self._roll()
                    continue
                end = pos + 1  # one document larger than a whole shard gets a shard of its own
            self.current.add(
                tokens[base : int(cum[end - 1])], lengths[pos:end], metas[pos:end] if metas else None
            )
            pos = end
            if pos < n:
                self._roll()

    def _roll(self) -> None:
        if self.current is not None:
            info = self.current.close()
            self.closed.append(info)
            self.current = None
            if self.on_close:
                self.on_close(info)

    def close(self) -> list[ShardInfo]:
        self._roll()
        return self.closed

    def abort(self) -> None:
        if self.current is not None:
            self.current.abort()
            self.current = None
