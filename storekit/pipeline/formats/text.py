"""Plain text files (any other name, also .gz/.zst): each file is one document, read whole."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

from storekit.pipeline import giant
from storekit.pipeline.formats.base import (
    INVALID_UTF8,
    OVERSIZED,
    TRUNCATED,
    Doc,
    PieceContext,
)
from storekit.pipeline.formats.streamed import Streamed
from storekit.pipeline.giant import GiantText
from storekit.pipeline.streams import Decompressed, TruncatedInput, open_stream


class TextFiles(Streamed):
    name = "text"

    def read(self, ctx: PieceContext) -> Iterator[Doc]:
        cap = ctx.max_doc_bytes
        with ctx.fs.open(ctx.src.url) as raw:
            stream: IO[bytes] | Decompressed = open_stream(raw, ctx.src.compression)
            try:
                data = stream.read(cap + 1)
            except TruncatedInput as exc:
                yield Doc(None, TRUNCATED, str(exc), 0, None, ctx.src.size)
                return
        if len(data) > cap:
            yield Doc(
                None, OVERSIZED, f"file larger than --max-doc-bytes ({cap} bytes)", 0, None, ctx.src.size
            )
            return
        meta = {f: (ctx.src.display if f == "path" else None) for f in ctx.keep_fields} or None
        if len(data) > giant.GIANT_BYTES:
            yield Doc(None, None, "", 0, meta, len(data), GiantText(data, 0, len(data), json_escaped=False))
            return
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield Doc(None, INVALID_UTF8, f"{exc.reason} at byte {exc.start}", 0, None, ctx.src.size)
            return
        yield Doc(text, None, "", 0, meta, len(data))


FORMAT = TextFiles()
