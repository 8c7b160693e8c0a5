"""The input formats: one module each (detection by name, splitting into pieces, reading), and the
registry below. Adding a format is one new module and one line in FORMATS.
"""

from __future__ import annotations

from storekit.errors import InputError
from storekit.pipeline.formats import arrow, hf_disk, jsonl, parquet, text
from storekit.pipeline.formats.base import InputFormat

FORMATS: dict[str, InputFormat] = {
    f.name: f for f in (jsonl.FORMAT, parquet.FORMAT, arrow.FORMAT, text.FORMAT)
}
FALLBACK = text.FORMAT  # a name no format claims is read as plain text
DISCOVERY_MODES = ("auto", hf_disk.NAME)  # what --format may say besides a format's name
COMPRESSION_SUFFIXES = {".gz": "gz", ".zst": "zst", ".zstd": "zst"}


def format_named(name: str) -> InputFormat:
    return FORMATS[name]


def detect_format(name: str, forced: str) -> tuple[str, str | None]:
    """(format name, compression) of a file: by its name, unless --format names a format."""
    base = name.lower()
    compression = None
    for suffix, kind in COMPRESSION_SUFFIXES.items():
        if base.endswith(suffix):
            compression, base = kind, base[: -len(suffix)]
    if forced not in DISCOVERY_MODES:
        fmt = FORMATS[forced]
    else:
        fmt = next((f for f in FORMATS.values() if f.suffixes and base.endswith(f.suffixes)), FALLBACK)
    if compression and not fmt.compressible:
        raise InputError(
            f"{name}: compressed {fmt.name} files are not supported; {fmt.name} compresses internally"
        )
    return fmt.name, compression
