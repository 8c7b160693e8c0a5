"""Finding the input files and the layout facts the planner splits them by.

Each input (a file, a directory, a glob, an `s3://` URL or prefix, a `save_to_disk` folder) expands to
`SourceFile`s in a stable order. Per format we record what lets a task start in the middle of a file:
the uncompressed size of compressed jsonl, rows per row group (parquet) or per record batch (arrow).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from storekit.config import mask_url
from storekit.errors import InputError, NotFoundError
from storekit.pipeline.inputs import InputFS, read_range
from storekit.places import is_s3_url

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
ARROW_SUFFIXES = (".arrow", ".feather", ".ipc")
COMPRESSION_SUFFIXES = {".gz": "gz", ".zst": "zst", ".zstd": "zst"}
_SKIP_NAMES = {"state.json", "dataset_info.json", "dataset_dict.json", "manifest.json"}


@dataclass(frozen=True, kw_only=True)
class SourceFile:
    url: str  # absolute local path, s3://bucket/key or bundled:NAME
    size: int  # bytes as stored
    format: str  # jsonl | parquet | arrow | text
    compression: str | None = None  # gz | zst (jsonl and text)
    data_size: int = 0  # uncompressed bytes (jsonl/text) or uncompressed column bytes (parquet/arrow)
    chunks: tuple[tuple[int, int], ...] = ()  # (rows, bytes) per row group / record batch
    arrow_stream: bool = False  # Arrow IPC stream (save_to_disk) rather than the random-access file format
    mtime: float | None = None  # only to notice a changed input on resume; never in the manifest

    @property
    def display(self) -> str:
        return mask_url(self.url)

    @property
    def rows(self) -> int:
        return sum(r for r, _ in self.chunks)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> SourceFile:
        doc = dict(doc)
        doc["chunks"] = tuple(tuple(c) for c in doc.get("chunks", ()))
        return cls(**doc)


def detect_format(name: str, forced: str) -> tuple[str, str | None]:
    base = name.lower()
    compression = None
    for suffix, kind in COMPRESSION_SUFFIXES.items():
        if base.endswith(suffix):
            compression, base = kind, base[: -len(suffix)]
    if forced not in ("auto", "hf-disk"):
        fmt = forced
    elif base.endswith(JSONL_SUFFIXES):
        fmt = "jsonl"
    elif base.endswith(PARQUET_SUFFIXES):
        fmt = "parquet"
    elif base.endswith(ARROW_SUFFIXES):
        fmt = "arrow"
    else:
        fmt = "text"
    if compression and fmt in ("parquet", "arrow"):
        raise InputError(f"{name}: compressed {fmt} files are not supported; {fmt} compresses internally")
    return fmt, compression


def discover_sources(
    inputs: Sequence[str], *, forced_format: str, text_key: str, fs: InputFS
) -> list[SourceFile]:
    """Every input file in a stable order (inputs as given, files sorted), each listed once."""
    seen: set[str] = set()
    out: list[SourceFile] = []
    for pattern in inputs:
        hf = _hf_disk_files(pattern, fs) if forced_format in ("auto", "hf-disk") else None
        if forced_format == "hf-disk" and hf is None:
            raise InputError(
                f"input {mask_url(pattern)} is not a `datasets` save_to_disk folder (no state.json)",
                hint="point --input at the folder save_to_disk wrote (for a DatasetDict: one split folder)",
            )
        found = hf if hf is not None else fs.expand(pattern)
        found = [f for f in found if os.path.basename(f[0]) not in _SKIP_NAMES or hf is not None]
        if not found:
            raise NotFoundError(
                f"input {mask_url(pattern)} matched no files",
                hint="check the path or glob (quote globs so the shell does not expand them)",
            )
        for url, size, mtime in found:
            if url in seen:
                continue
            seen.add(url)
            fmt, compression = ("arrow", None) if hf is not None else detect_format(url, forced_format)
            out.append(_describe(fs, url, size, mtime, fmt, compression, text_key))
    return out


def _hf_disk_files(pattern: str, fs: InputFS) -> list[tuple[str, int, float | None]] | None:
    """The arrow files of a `Dataset.save_to_disk` folder, in the order state.json lists them."""
    if any(c in pattern for c in "*?[") or pattern.startswith("bundled:"):
        return None
    base = pattern.rstrip("/")
    try:
        with fs.open(f"{base}/state.json") as fh:
            state = json.loads(fh.read())
    except (NotFoundError, InputError, OSError, ValueError):
        if not is_s3_url(pattern) and os.path.isfile(os.path.join(base, "dataset_dict.json")):
            raise InputError(
                f"{pattern} is a DatasetDict (several splits)",
                hint=f"point --input at one split folder, e.g. {base}/train",
            ) from None
        return None
    names = [f["filename"] for f in state.get("_data_files", []) if isinstance(f, dict)]
    if not names:
        raise InputError(f"{mask_url(base)}/state.json lists no _data_files")
    out = []
    for name in names:
        files = fs.expand(f"{base}/{name}")
        if not files:
            raise InputError(f"{mask_url(base)}/state.json names {name}, which does not exist")
        out.extend(files)
    return out


def _describe(
    fs: InputFS, url: str, size: int, mtime: float | None, fmt: str, compression: str | None, text_key: str
) -> SourceFile:
    common: dict[str, Any] = {"url": url, "size": size, "mtime": mtime, "format": fmt}
    if fmt in ("jsonl", "text"):
        data_size = size if compression is None else uncompressed_size(fs, url, size, compression)
        return SourceFile(**common, compression=compression, data_size=data_size)
    if fmt == "parquet":
        return _describe_parquet(fs, common, text_key)
    return _describe_arrow(fs, common, text_key)


def uncompressed_size(fs: InputFS, url: str, size: int, compression: str) -> int:
    """From the gzip ISIZE trailer or the zstd frame header; counted by decompressing otherwise.

    For a multi-member gzip the trailer only tells the last member's size: task boundaries are then
    uneven, never wrong, because the last task of a file reads to its end.
    """
    if size == 0:
        return 0
    if compression == "gz":
        if size < 18:
            return 0
        (isize,) = struct.unpack("<I", read_range(fs, url, size - 4, 4))
        return int(isize)
    import zstandard

    head = read_range(fs, url, 0, 18)
    try:
        content = zstandard.frame_content_size(head)
    except zstandard.ZstdError:
        content = -1
    if content >= 0:
        return int(content)
    from storekit.pipeline.readers import count_uncompressed

    return count_uncompressed(fs, url, compression)


def _check_column(url: str, names: Sequence[str], text_key: str) -> None:
    if text_key not in names:
        raise InputError(
            f"{mask_url(url)}: no column {text_key!r} (columns: {', '.join(names) or 'none'})",
            hint="choose the text column with --text-key",
        )


def _describe_parquet(fs: InputFS, common: dict[str, Any], text_key: str) -> SourceFile:
    import pyarrow.parquet as pq

    url = common["url"]
    try:
        with fs.open(url) as fh:
            meta = pq.ParquetFile(fh).metadata
            names = list(meta.schema.names)
            chunks = tuple(
                (meta.row_group(i).num_rows, meta.row_group(i).total_byte_size)
                for i in range(meta.num_row_groups)
            )
    except (OSError, ValueError) as exc:
        raise InputError(f"{mask_url(url)}: not a readable parquet file ({exc})") from None
    _check_column(url, names, text_key)
    return SourceFile(**common, data_size=sum(b for _, b in chunks), chunks=chunks)


def _describe_arrow(fs: InputFS, common: dict[str, Any], text_key: str) -> SourceFile:
    from storekit.pipeline.readers import open_arrow

    url = common["url"]
    try:
        with open_arrow(fs, url) as (stream, batches):
            chunks = tuple((b.num_rows, b.nbytes) for b in batches)
            names = list(batches.schema.names)
    except (OSError, ValueError) as exc:
        raise InputError(f"{mask_url(url)}: not a readable Arrow IPC file or stream ({exc})") from None
    _check_column(url, names, text_key)
    return SourceFile(**common, data_size=sum(b for _, b in chunks), chunks=chunks, arrow_stream=stream)
