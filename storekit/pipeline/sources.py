"""Finding the input files and the layout facts the planner splits them by.

Each input (a file, a directory, a glob, an `s3://` URL or prefix, a `save_to_disk` folder) expands to
`SourceFile`s in a stable order. Per format we record what lets a task start in the middle of a file:
the uncompressed size of compressed jsonl, rows per row group (parquet) or per record batch (arrow).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from storekit.config import mask_url
from storekit.errors import InputError, NotFoundError
from storekit.pipeline.formats import detect_format, format_named, hf_disk
from storekit.pipeline.formats.base import SourceFile
from storekit.pipeline.formats.streamed import uncompressed_size
from storekit.pipeline.inputs import InputFS

__all__ = ["SourceFile", "detect_format", "discover_sources", "uncompressed_size"]
_SKIP_NAMES = {"state.json", "dataset_info.json", "dataset_dict.json", "manifest.json"}


def discover_sources(
    inputs: Sequence[str], *, forced_format: str, text_key: str, fs: InputFS
) -> list[SourceFile]:
    """Every input file in a stable order (inputs as given, files sorted), each listed once."""
    seen: set[str] = set()
    out: list[SourceFile] = []
    for pattern in inputs:
        hf = hf_disk.save_to_disk_files(pattern, fs) if forced_format in ("auto", hf_disk.NAME) else None
        if forced_format == hf_disk.NAME and hf is None:
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
            common: dict[str, Any] = {"url": url, "size": size, "mtime": mtime, "format": fmt}
            out.append(format_named(fmt).describe(fs, common, compression, text_key))
    return out
