"""Read the token files each tool writes and summarise them the same way, independently of the tools.

- Megatron `.bin`/`.idx` (storekit and Megatron write these): MMIDIDX header, version, dtype code,
  sequence count, document count, int32 sequence lengths, int64 pointers, int64 document indices.
- datatrove `.ds` (raw tokens) + `.ds.index` (uint64 cumulative document ends) + `.ds.metadata`.

For each output we compute: token count, document count, dtype, a digest of the ordered token stream
(tokens as little-endian uint32, so a uint16 and an int32 file with the same ids hash the same), and
an order-independent digest (sorted per-document digests) to compare with a tool that shuffles.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

_MEGATRON_DTYPES = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}


@dataclass
class TokenSummary:
    files: list[str]
    tokens: int = 0
    documents: int = 0
    dtype: str = ""
    bin_bytes: int = 0
    stream_sha256: str = ""
    multiset_sha256: str = ""
    eos_at_doc_ends: int = 0  # documents whose last token is the eos id
    doc_lengths_sha256: str = ""
    notes: list[str] = field(default_factory=list)


def _megatron_idx(idx: Path) -> tuple[np.dtype, np.ndarray, np.ndarray]:
    """(dtype, sequence lengths, document indices) of one .idx file."""
    data = idx.read_bytes()
    if data[:9] != b"MMIDIDX\x00\x00":
        raise ValueError(f"{idx}: not a Megatron index")
    (version,) = struct.unpack_from("<Q", data, 9)
    (code,) = struct.unpack_from("<B", data, 17)
    seq_count, doc_count = struct.unpack_from("<QQ", data, 18)
    off = 34
    lengths = np.frombuffer(data, dtype=np.int32, count=seq_count, offset=off)
    off += 4 * seq_count + 8 * seq_count
    doc_idx = np.frombuffer(data, dtype=np.int64, count=doc_count, offset=off)
    if version != 1:
        raise ValueError(f"{idx}: index version {version}")
    return np.dtype(_MEGATRON_DTYPES[code]), lengths, doc_idx


def _doc_lengths_from_megatron(lengths: np.ndarray, doc_idx: np.ndarray) -> np.ndarray:
    cum = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    return np.diff(cum[doc_idx])


class _Summariser:
    def __init__(self, eos_id: int) -> None:
        self.stream = hashlib.sha256()
        self.lengths = hashlib.sha256()
        self.doc_digests: list[bytes] = []
        self.tokens = 0
        self.docs = 0
        self.eos_ends = 0
        self.eos_id = eos_id

    def add_file(self, tokens: np.ndarray, doc_lengths: np.ndarray) -> None:
        as32 = tokens.astype("<u4", copy=False)
        self.stream.update(as32.tobytes())
        self.lengths.update(doc_lengths.astype("<i8").tobytes())
        ends = np.cumsum(doc_lengths)
        start = 0
        for end in ends.tolist():
            doc = as32[start:end]
            self.doc_digests.append(hashlib.blake2b(doc.tobytes(), digest_size=16).digest())
            if end > start and int(doc[-1]) == self.eos_id:
                self.eos_ends += 1
            start = end
        self.tokens += int(tokens.size)
        self.docs += int(doc_lengths.size)

    def finish(self, s: TokenSummary) -> TokenSummary:
        s.tokens, s.documents, s.eos_at_doc_ends = self.tokens, self.docs, self.eos_ends
        s.stream_sha256 = self.stream.hexdigest()
        s.doc_lengths_sha256 = self.lengths.hexdigest()
        multiset = hashlib.sha256()
        for d in sorted(self.doc_digests):
            multiset.update(d)
        s.multiset_sha256 = multiset.hexdigest()
        return s


def natural_key(p: Path) -> list[object]:
    import re

    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(p))]


def summarise_megatron(idx_files: list[Path], eos_id: int) -> TokenSummary:
    """Summarise Megatron-format shards, concatenated in the given order."""
    s = TokenSummary(files=[str(p) for p in idx_files])
    acc = _Summariser(eos_id)
    for idx in idx_files:
        dtype, lengths, doc_idx = _megatron_idx(idx)
        binf = idx.with_suffix(".bin")
        tokens = np.fromfile(binf, dtype=dtype)
        s.bin_bytes += binf.stat().st_size
        if tokens.size != int(lengths.sum()):
            s.notes.append(f"{binf.name}: {tokens.size} tokens in .bin, {int(lengths.sum())} in .idx")
        s.dtype = str(dtype)
        acc.add_file(tokens, _doc_lengths_from_megatron(lengths, doc_idx))
    return acc.finish(s)


def summarise_datatrove(ds_files: list[Path], eos_id: int, token_size: int = 2) -> TokenSummary:
    s = TokenSummary(files=[str(p) for p in ds_files])
    acc = _Summariser(eos_id)
    dtype = np.dtype("<u2" if token_size == 2 else "<u4")
    for ds in ds_files:
        tokens = np.fromfile(ds, dtype=dtype)
        s.bin_bytes += ds.stat().st_size
        ends = np.fromfile(str(ds) + ".index", dtype="<u8").astype(np.int64)
        lengths = np.diff(np.concatenate([[0], ends]))
        if ends.size and int(ends[-1]) != tokens.size:
            s.notes.append(f"{ds.name}: {tokens.size} tokens, index ends at {int(ends[-1])}")
        s.dtype = str(dtype)
        acc.add_file(tokens, lengths)
    return acc.finish(s)


def find_megatron_shards(root: Path) -> list[Path]:
    return sorted(root.rglob("*.idx"), key=natural_key)


def iter_jsonl_texts(paths: list[Path], key: str = "text") -> Iterator[str]:
    import json

    for p in paths:
        with open(p, "rb") as f:
            for line in f:
                yield json.loads(line)[key]
