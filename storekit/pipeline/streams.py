"""Byte streams for jsonl: decompression with truncation detection, and a line splitter.

`iter_lines` yields the lines that *start* in [start, end) of the uncompressed stream, so adjacent
byte ranges own disjoint lines whatever their boundaries cut. A line longer than `max_line` is
skipped while scanning, never held in memory whole.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Generator, Iterator
from typing import IO, Any

BLOCK = 4 << 20
_GZ_OUT = 8 << 20
_ZST_IN = 128 << 10  # small input steps bound the output of one decompress call


class TruncatedInput(Exception):
    """The compressed stream ended in the middle (a cut-off download or copy)."""

    def __init__(self, offset: int, detail: str) -> None:
        super().__init__(detail)
        self.offset = offset  # uncompressed bytes delivered before the damage


class Decompressed:
    """read(n) over gzip (multi-member) or zstd (multi-frame) with damage reported, not hidden."""

    def __init__(self, raw: IO[bytes], kind: str) -> None:
        self.raw = raw
        self.kind = kind
        self.position = 0
        self._pending = b""
        self._out = bytearray()
        self._eof = False
        self._new_member()

    def _new_member(self) -> None:
        self._d: Any
        if self.kind == "gz":
            self._d = zlib.decompressobj(wbits=31)
        else:
            import zstandard

            self._d = zstandard.ZstdDecompressor().decompressobj()

    def _fill(self, want: int) -> None:
        try:
            while len(self._out) < want and not self._eof:
                data = self._pending or self.raw.read(_ZST_IN if self.kind == "zst" else BLOCK)
                self._pending = b""
                if not data:
                    if not self._d.eof and self._member_started:
                        raise TruncatedInput(self.position + len(self._out), "compressed stream is truncated")
                    self._eof = True
                    return
                self._member_started = True
                self._feed(data)
        except TruncatedInput as exc:
            self._error, self._eof = exc, True
        except zlib.error as exc:
            detail = f"corrupt gzip data ({exc})"
            self._error, self._eof = TruncatedInput(self.position + len(self._out), detail), True
        except Exception as exc:
            if type(exc).__name__ != "ZstdError":
                raise
            detail = f"corrupt zstd data ({exc})"
            self._error, self._eof = TruncatedInput(self.position + len(self._out), detail), True

    _member_started = False

    def _feed(self, data: bytes) -> None:
        d = self._d
        if self.kind == "gz":
            self._out += d.decompress(data, _GZ_OUT)
            while d.unconsumed_tail and not d.eof:
                self._out += d.decompress(d.unconsumed_tail, _GZ_OUT)
        else:
            self._out += d.decompress(data)
        if d.eof:
            rest = d.unused_data
            self._new_member()
            self._member_started = False
            if rest:
                self._pending = rest.lstrip(b"\x00") if self.kind == "gz" else rest

    _error: TruncatedInput | None = None

    def read(self, n: int) -> bytes:
        """Up to n bytes; b"" at the end. Damage is raised once the good bytes before it are delivered."""
        self._fill(n)
        if not self._out and self._error is not None:
            raise self._error
        chunk = bytes(self._out[:n])
        del self._out[:n]
        self.position += len(chunk)
        return chunk

    def skip(self, n: int) -> None:
        while n > 0:
            got = len(self.read(min(n, BLOCK)))
            if not got:
                return
            n -= got


def open_stream(raw: IO[bytes], compression: str | None) -> IO[bytes] | Decompressed:
    return raw if compression is None else Decompressed(raw, compression)


def _seek(stream: IO[bytes] | Decompressed, offset: int) -> None:
    if isinstance(stream, Decompressed):
        stream.skip(offset)
    else:
        stream.seek(offset)


def iter_lines(
    stream: IO[bytes] | Decompressed, start: int, end: int | None, max_line: int
) -> Iterator[tuple[int, memoryview | bytes | None, int]]:
    """(offset, line or None when longer than max_line, length) for each line starting in [start, end)."""
    pos = max(start - 1, 0)
    _seek(stream, pos)
    # a small range reads little more than itself (S3: no 4 MiB GET for a 1 MiB task)
    block = BLOCK if end is None else max(64 << 10, min(BLOCK, end - pos + (64 << 10)))
    buf = stream.read(block)
    i = 0
    if start > 0:
        # the line that starts at `start` is ours only if the byte before it ends a line
        while True:
            nl = buf.find(b"\n")
            if nl >= 0:
                i = nl + 1
                break
            pos += len(buf)
            buf = stream.read(block)
            if not buf:
                return
    view = memoryview(buf)
    while True:
        line_start = pos + i
        if end is not None and line_start >= end:
            return
        nl = buf.find(b"\n", i)
        if nl >= 0:
            length = nl - i
            yield line_start, (view[i:nl] if length <= max_line else None), length
            i = nl + 1
            continue
        rest = len(buf) - i
        if rest > max_line:
            length, buf, i = yield from _skip_long_line(stream, line_start, rest)
            pos = line_start + length + 1 - i
            view = memoryview(buf)
            if not buf:
                return
            continue
        chunk = stream.read(block)
        if not chunk:
            if rest:
                yield line_start, view[i:], rest
            return
        if rest < block:  # the usual case: carry the line's start into the next buffer
            buf = buf[i:] + chunk
            view = memoryview(buf)
            pos, i = line_start, 0
            continue
        # a line longer than a block: gather its pieces once (no quadratic re-copying) and hand it
        # over without keeping a reference, so a giant document is in memory once, not twice
        parts = [buf[i:], chunk]
        length, buf, i = yield from _long_line(stream, line_start, parts, block, max_line)
        pos = line_start + length + 1 - i
        view = memoryview(buf)
        if not buf:
            return


def _long_line(
    stream: IO[bytes] | Decompressed, line_start: int, parts: list[bytes], block: int, max_line: int
) -> Generator[tuple[int, memoryview | bytes | None, int], None, tuple[int, bytes, int]]:
    """Read the rest of a multi-block line; yield it (or report it over-long); return like _skip_long_line."""
    length = sum(len(p) for p in parts[:-1])
    while True:
        last = parts[-1]
        nl = last.find(b"\n")
        if nl >= 0:
            length += nl
            tail, after = last, nl + 1
            parts[-1] = last[:nl]
            break
        length += len(last)
        if length > max_line:
            parts.clear()
            return (yield from _skip_long_line(stream, line_start, length))
        chunk = stream.read(block)
        if not chunk:
            tail, after = b"", 0
            break
        parts.append(chunk)
    if length > max_line:
        parts.clear()
        yield line_start, None, length
    else:
        yield line_start, _take(parts), length
    return length, tail, after


def _take(parts: list[bytes]) -> bytes:
    data = b"".join(parts)
    parts.clear()
    return data


def _skip_long_line(
    stream: IO[bytes] | Decompressed, line_start: int, seen: int
) -> Generator[tuple[int, memoryview | bytes | None, int], None, tuple[int, bytes, int]]:
    """Scan past an over-long line; report it; return (length, next buffer, index after its newline)."""
    length = seen
    while True:
        chunk = stream.read(BLOCK)
        if not chunk:
            yield line_start, None, length
            return length, b"", 0
        nl = chunk.find(b"\n")
        if nl < 0:
            length += len(chunk)
            continue
        length += nl
        yield line_start, None, length
        return length, chunk, nl + 1


def count_newlines(stream: IO[bytes] | Decompressed, upto: int) -> int:
    """Newlines in the first `upto` bytes: turns a byte offset into a line number for messages."""
    count = 0
    left = upto
    with contextlib.suppress(TruncatedInput):  # a damaged stream still has countable lines before the damage
        while left > 0:
            chunk = stream.read(min(BLOCK, left))
            if not chunk:
                break
            count += chunk.count(b"\n")
            left -= len(chunk)
    return count
