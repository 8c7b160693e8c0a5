"""JSON Lines (`.jsonl`, `.json`, `.ndjson`, also .gz/.zst): one JSON object per line, text under a key.

A piece is a byte range of the uncompressed stream; it owns the lines that start inside it.
Compressed files are split too, but into at most MAX_COMPRESSED_SPLITS pieces, since each piece
re-decompresses the file up to its start.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from storekit.pipeline import giant
from storekit.pipeline.formats.base import (
    INVALID_UTF8,
    MALFORMED,
    MISSING,
    NON_STRING,
    OVERSIZED,
    TRUNCATED,
    Doc,
    Piece,
    PieceContext,
    SourceFile,
)
from storekit.pipeline.formats.streamed import Streamed
from storekit.pipeline.giant import GiantText, blank_text, locate_text
from storekit.pipeline.streams import TruncatedInput, count_newlines, iter_lines, open_stream

MAX_COMPRESSED_SPLITS = 8


class JsonLines(Streamed):
    name = "jsonl"
    suffixes = (".jsonl", ".json", ".ndjson")

    def split(self, index: int, src: SourceFile, target: int) -> list[Piece]:
        if src.data_size <= target:
            return super().split(index, src, target)
        n = -(-src.data_size // target)
        if src.compression:
            n = min(n, MAX_COMPRESSED_SPLITS)
        bounds = [src.data_size * k // n for k in range(n + 1)]
        return [
            Piece(index, bounds[k], None if k == n - 1 else bounds[k + 1], bounds[k + 1] - bounds[k])
            for k in range(n)
        ]

    def where(self, ctx: PieceContext, position: int) -> str:
        with ctx.fs.open(ctx.src.url) as raw:
            line = count_newlines(open_stream(raw, ctx.src.compression), position) + 1
        return f"{ctx.src.display}:{line}"

    def read(self, ctx: PieceContext) -> Iterator[Doc]:
        giant_bytes = giant.GIANT_BYTES  # read per piece: tests lower it
        loads, key, keep = orjson.loads, ctx.text_key, ctx.keep_fields
        decode_error = orjson.JSONDecodeError
        span = None if ctx.piece.end is None else ctx.piece.end - ctx.piece.start
        block = 8 << 20 if span is None or ctx.src.compression else min(8 << 20, span + (128 << 10))
        with ctx.fs.open(ctx.src.url, block_size=block) as raw:
            stream = open_stream(raw, ctx.src.compression)
            lines = iter_lines(stream, ctx.piece.start, ctx.piece.end, ctx.max_doc_bytes)
            offset = ctx.piece.start
            try:
                for offset, line, length in lines:
                    if line is None:
                        yield Doc(
                            None,
                            OVERSIZED,
                            f"line of {length} bytes > --max-doc-bytes",
                            offset,
                            None,
                            length + 1,
                        )
                        continue
                    if length > giant_bytes:
                        whole = line if isinstance(line, bytes) else bytes(line)
                        del line
                        found = _giant_line(ctx, whole, offset, length)
                        if found is not None:
                            yield found
                            continue
                        line = whole
                        del whole
                    try:
                        obj = loads(line)
                    except decode_error as exc:
                        if not bytes(line).strip():
                            continue  # blank line: not a document
                        msg = str(exc)
                        reason = INVALID_UTF8 if ("UTF-8" in msg or "surrogate" in msg) else MALFORMED
                        yield Doc(None, reason, msg.split(": line 1")[0], offset, None, length + 1)
                        continue
                    del line  # a giant line is not kept while its document is tokenized
                    if type(obj) is not dict:
                        yield Doc(
                            None,
                            MALFORMED,
                            f"expected a JSON object, got {type(obj).__name__}",
                            offset,
                            None,
                            length + 1,
                        )
                        continue
                    text = obj.get(key)
                    meta = {f: obj.get(f) for f in keep} if keep else None
                    if type(text) is str:
                        yield Doc(text, None, "", offset, meta, length + 1)
                    elif text is None:
                        yield Doc(None, MISSING, f"no {key!r} field", offset, None, length + 1)
                    else:
                        yield Doc(
                            None,
                            NON_STRING,
                            f"{key!r} is a {type(text).__name__}, not a string",
                            offset,
                            None,
                            length + 1,
                        )
            except TruncatedInput as exc:
                if (ctx.piece.end is None or exc.offset < ctx.piece.end) and exc.offset >= ctx.piece.start:
                    yield Doc(
                        None,
                        TRUNCATED,
                        f"{exc} after {exc.offset} bytes",
                        max(offset, exc.offset),
                        None,
                        0,
                    )


def _giant_line(ctx: PieceContext, raw: bytes, offset: int, length: int) -> Doc | None:
    """A line whose text field is several MiB: keep the bytes, parse only the small rest."""
    span = locate_text(raw, ctx.text_key)
    if span is None:
        return None  # not an object with a string text field: the normal path reports why
    try:
        rest = orjson.loads(blank_text(raw, span))
    except orjson.JSONDecodeError:
        return None
    meta = {f: rest.get(f) for f in ctx.keep_fields} if ctx.keep_fields else None
    return Doc(None, None, "", offset, meta, length + 1, GiantText(raw, span[0], span[1], json_escaped=True))


FORMAT = JsonLines()
