"""What the byte-stream formats (jsonl, text) share: their size once decompressed, their description."""

from __future__ import annotations

import struct
from typing import Any

from storekit.pipeline.formats.base import InputFormat, SourceFile
from storekit.pipeline.inputs import InputFS, read_range
from storekit.pipeline.streams import Decompressed, TruncatedInput

DEFLATE_MAX_RATIO = 1032  # deflate's best case: 258 bytes per 2-bit code, about 1032:1


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
        if isize <= size * DEFLATE_MAX_RATIO:
            return int(isize)
        # more than deflate can ever expand to: the trailer is not one (a truncated file's last bytes),
        # so its progress total and task split would be invented ("0 B/3.7 GiB" for 101 bytes)
        return count_uncompressed(fs, url, compression)
    import zstandard

    head = read_range(fs, url, 0, 18)
    try:
        content = zstandard.frame_content_size(head)
    except zstandard.ZstdError:
        content = -1
    if content >= 0:
        return int(content)
    return count_uncompressed(fs, url, compression)


def count_uncompressed(fs: InputFS, url: str, compression: str) -> int:
    """Uncompressed bytes up to the end or to the first damage (the reader reports the damage)."""
    with fs.open(url) as raw:
        stream = Decompressed(raw, compression)
        total = 0
        try:
            while chunk := stream.read(8 << 20):
                total += len(chunk)
        except TruncatedInput as exc:
            return max(exc.offset, 1)  # one byte at least: a task reads the file and reports it
        return total


def data_size(fs: InputFS, url: str, size: int, compression: str | None) -> int:
    return size if compression is None else uncompressed_size(fs, url, size, compression)


class Streamed(InputFormat):
    """A format read as one byte stream, maybe compressed: its data size is the stream's."""

    restatable = True

    def describe(
        self, fs: InputFS, common: dict[str, Any], compression: str | None, text_key: str
    ) -> SourceFile:
        size = data_size(fs, common["url"], common["size"], compression)
        return SourceFile(**common, compression=compression, data_size=size)
