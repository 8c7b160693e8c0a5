"""Megatron indexed datasets (`.bin` + `.idx`), as read by Megatron-LM, NeMo and GPT-NeoX.

`.bin` is every document's token ids back to back. `.idx` (all little-endian):

    9 bytes   magic  b"MMIDIDX\\x00\\x00"
    uint64    version = 1
    uint8     dtype code (uint16 = 8, int32 = 4)
    uint64    sequence count N      (one sequence per document here)
    uint64    document count N + 1  (length of the document index array)
    int32[N]  sequence lengths in tokens
    int64[N]  sequence byte offsets into .bin
    int64[N+1] document indices: 0, 1, ..., N
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_SIZE = 9 + 8 + 1 + 8 + 8
DTYPE_CODES = {
    "uint8": 1,
    "int8": 2,
    "int16": 3,
    "int32": 4,
    "int64": 5,
    "float64": 6,
    "float32": 7,
    "uint16": 8,
}
CODE_DTYPES = {v: k for k, v in DTYPE_CODES.items()}
_CHUNK = 1 << 20


def index_header(dtype: str, sequences: int) -> bytes:
    return (
        MAGIC
        + struct.pack("<Q", VERSION)
        + struct.pack("<B", DTYPE_CODES[dtype])
        + struct.pack("<QQ", sequences, sequences + 1)
    )


def iter_index_chunks(dtype: str, lengths_file: Path, sequences: int) -> Iterator[bytes]:
    """The whole `.idx`, streamed from a file of int32 lengths so memory stays bounded."""
    itemsize = np.dtype(dtype).itemsize
    yield index_header(dtype, sequences)
    lengths = np.memmap(lengths_file, dtype=np.int32, mode="r") if sequences else np.zeros(0, np.int32)
    for k in range(0, sequences, _CHUNK):
        yield lengths[k : k + _CHUNK].tobytes()
    offset = 0
    for k in range(0, sequences, _CHUNK):
        chunk = lengths[k : k + _CHUNK].astype(np.int64) * itemsize
        ends = np.cumsum(chunk) + offset
        yield (ends - chunk).tobytes()
        offset = int(ends[-1])
    for k in range(0, sequences + 1, _CHUNK):
        yield np.arange(k, min(k + _CHUNK, sequences + 1), dtype=np.int64).tobytes()
    del lengths


@dataclass(frozen=True)
class IndexInfo:
    dtype: str
    sequences: int
    documents: int  # document index entries (= sequences + 1 here)
    tokens: int


class BadIndexError(ValueError):
    """An `.idx` that is malformed or does not match its `.bin`."""


def check_index(read_at: Callable[[int, int], bytes], idx_size: int, bin_size: int) -> IndexInfo:
    """Validate an `.idx` against its `.bin` size; raises BadIndexError naming the first problem."""
    if idx_size < HEADER_SIZE:
        raise BadIndexError(f"index is {idx_size} bytes, shorter than the {HEADER_SIZE}-byte header")
    head = read_at(0, HEADER_SIZE)
    if head[:9] != MAGIC:
        raise BadIndexError(f"bad magic {head[:9]!r}, expected {MAGIC!r}")
    (version,) = struct.unpack("<Q", head[9:17])
    if version != VERSION:
        raise BadIndexError(f"version {version}, expected {VERSION}")
    code = head[17]
    if code not in CODE_DTYPES:
        raise BadIndexError(f"unknown dtype code {code}")
    dtype = CODE_DTYPES[code]
    sequences, documents = struct.unpack("<QQ", head[18:34])
    expected = HEADER_SIZE + sequences * 4 + sequences * 8 + documents * 8
    if idx_size != expected:
        raise BadIndexError(
            f"index is {idx_size} bytes; {sequences} sequences and {documents} documents need {expected}"
        )
    itemsize = np.dtype(dtype).itemsize
    offset, tokens = 0, 0
    for k in range(0, sequences, _CHUNK):
        n = min(_CHUNK, sequences - k)
        lengths = np.frombuffer(read_at(HEADER_SIZE + 4 * k, 4 * n), dtype=np.int32)
        pointers = np.frombuffer(read_at(HEADER_SIZE + 4 * sequences + 8 * k, 8 * n), dtype=np.int64)
        if (lengths < 0).any():
            raise BadIndexError(f"negative sequence length near sequence {k}")
        sizes = lengths.astype(np.int64) * itemsize
        starts = np.cumsum(sizes) - sizes + offset
        bad = np.nonzero(pointers != starts)[0]
        if bad.size:
            i = int(bad[0])
            raise BadIndexError(f"sequence {k + i} points at byte {pointers[i]}, expected {starts[i]}")
        offset += int(sizes.sum())
        tokens += int(lengths.sum())
    if offset != bin_size:
        raise BadIndexError(f"index describes {offset} bytes of tokens but the .bin has {bin_size}")
    doc_base = HEADER_SIZE + 12 * sequences
    prev = -1
    for k in range(0, documents, _CHUNK):
        n = min(_CHUNK, documents - k)
        docs = np.frombuffer(read_at(doc_base + 8 * k, 8 * n), dtype=np.int64)
        if docs.size and (docs[0] < prev or (np.diff(docs) < 0).any()):
            raise BadIndexError("document indices are not increasing")
        if k == 0 and docs.size and docs[0] != 0:
            raise BadIndexError(f"document indices start at {docs[0]}, expected 0")
        prev = int(docs[-1]) if docs.size else prev
    if documents and prev != sequences:
        raise BadIndexError(f"document indices end at {prev}, expected the sequence count {sequences}")
    return IndexInfo(dtype=dtype, sequences=sequences, documents=documents, tokens=tokens)


def reader_from_file(fh: IO[bytes]) -> Callable[[int, int], bytes]:
    def read_at(offset: int, size: int) -> bytes:
        fh.seek(offset)
        data = fh.read(size)
        if len(data) != size:
            raise BadIndexError(f"short read at byte {offset}")
        return data

    return read_at
