"""Test helpers for `prepare dataset`: real sample text, writers for every input format, an
independent Megatron reader (written from the format description, not from storekit's writer),
(the CLI runner is tests/conftest.py's)."""

from __future__ import annotations

import gzip
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[3]
SAMPLE_CORPUS = REPO / "storekit" / "samples" / "cpython-stdlib-sample.jsonl.gz"
TOKENIZER = "bundled:anthropic-bpe-65k.tokenizer.json.gz"
EOS_ID = 0


def sample_records(limit_bytes: int = 400_000, skip: int = 0, max_doc: int = 60_000) -> list[dict[str, Any]]:
    """Real documents (CPython stdlib sources) from the bundled corpus, small ones first in file order."""
    out, total = [], 0
    with gzip.open(SAMPLE_CORPUS, "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i < skip:
                continue
            rec = json.loads(line)
            if not rec["text"].strip() or len(rec["text"]) > max_doc:
                continue
            out.append(rec)
            total += len(rec["text"])
            if total >= limit_bytes:
                break
    return out


def write_jsonl(path: Path, records: Sequence[Any], compression: str | None = None) -> Path:
    lines = [
        r if isinstance(r, bytes) else json.dumps(r, ensure_ascii=False).encode("utf-8") for r in records
    ]
    data = b"\n".join(lines) + b"\n"
    if compression == "gz":
        data = gzip.compress(data)
    elif compression == "zst":
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def tokenizer():
    from tokenizers import Tokenizer

    data = gzip.decompress(
        (REPO / "storekit" / "samples" / "anthropic-bpe-65k.tokenizer.json.gz").read_bytes()
    )
    return Tokenizer.from_str(data.decode("utf-8"))


def expected_ids(texts: Sequence[str]) -> list[list[int]]:
    tok = tokenizer()
    return [[*tok.encode(t, add_special_tokens=False).ids, EOS_ID] for t in texts]


# -- an independent reader of Megatron indexed datasets -------------------------------------------
_DTYPES = {
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
class MegatronShard:
    dtype: Any
    lengths: np.ndarray
    pointers: np.ndarray
    doc_index: np.ndarray
    documents: list[np.ndarray]


def read_megatron(prefix: Path) -> MegatronShard:
    idx = Path(f"{prefix}.idx").read_bytes()
    assert idx[:9] == b"MMIDIDX\x00\x00", idx[:9]
    (version,) = struct.unpack_from("<Q", idx, 9)
    assert version == 1
    dtype = _DTYPES[idx[17]]
    n_seq, n_doc = struct.unpack_from("<QQ", idx, 18)
    off = 34
    lengths = np.frombuffer(idx, dtype="<i4", count=n_seq, offset=off)
    off += 4 * n_seq
    pointers = np.frombuffer(idx, dtype="<i8", count=n_seq, offset=off)
    off += 8 * n_seq
    doc_index = np.frombuffer(idx, dtype="<i8", count=n_doc, offset=off)
    off += 8 * n_doc
    assert off == len(idx), "trailing bytes in .idx"
    data = Path(f"{prefix}.bin").read_bytes()
    item = np.dtype(dtype).itemsize
    docs = []
    pos = 0
    for length, ptr in zip(lengths, pointers, strict=True):
        assert ptr == pos, (ptr, pos)
        docs.append(np.frombuffer(data, dtype=dtype, count=int(length), offset=int(ptr)))
        pos += int(length) * item
    assert pos == len(data), "the .bin holds bytes no sequence points at"
    assert list(doc_index) == list(range(n_seq + 1))
    return MegatronShard(dtype, lengths, pointers, doc_index, docs)


def dataset_documents(dataset: Path, split: str = "train") -> list[list[int]]:
    manifest = json.loads((dataset / "manifest.json").read_text())
    out: list[list[int]] = []
    for shard in manifest["shards"]:
        if shard["split"] == split:
            out.extend(d.tolist() for d in read_megatron(dataset / shard["name"]).documents)
    return out


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file below root (relative path -> bytes), the manifest without its timestamp."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "manifest.json":
                doc = json.loads(data)
                doc.pop("created_at")
                data = json.dumps(doc, sort_keys=True).encode()
            out[path.relative_to(root).as_posix()] = data
    return out
