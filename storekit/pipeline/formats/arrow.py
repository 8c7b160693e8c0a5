"""Arrow IPC (`.arrow`, `.feather`, `.ipc`, and `datasets` save_to_disk shards): the random-access file
format or the stream format; pieces are row ranges along record batches."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from storekit.config import mask_url
from storekit.errors import InputError
from storekit.pipeline.formats.base import Doc, PieceContext, SourceFile
from storekit.pipeline.formats.columnar import Columnar, check_column, columns, rows_of
from storekit.pipeline.inputs import InputFS


class Arrow(Columnar):
    name = "arrow"
    suffixes = (".arrow", ".feather", ".ipc")

    def describe(
        self, fs: InputFS, common: dict[str, Any], compression: str | None, text_key: str
    ) -> SourceFile:
        url = common["url"]
        try:
            with open_arrow(fs, url) as (stream, batches):
                chunks = tuple((b.num_rows, b.nbytes) for b in batches)
                names = list(batches.schema.names)
        except (OSError, ValueError) as exc:
            raise InputError(f"{mask_url(url)}: not a readable Arrow IPC file or stream ({exc})") from None
        check_column(url, names, text_key)
        return SourceFile(**common, data_size=sum(b for _, b in chunks), chunks=chunks, arrow_stream=stream)

    def read(self, ctx: PieceContext) -> Iterator[Doc]:
        start, end = ctx.piece.start, ctx.piece.end if ctx.piece.end is not None else ctx.src.rows
        with open_arrow(ctx.fs, ctx.src.url) as (_stream, batches):
            row = 0
            for batch in batches:
                if row >= end:
                    break
                if row + batch.num_rows > start:
                    cols = columns(ctx, batch.schema.names)
                    yield from rows_of(ctx, batch.select(cols), row, start, end)
                row += batch.num_rows


FORMAT = Arrow()


class _Batches:
    def __init__(self, reader: Any, stream: bool) -> None:
        self.reader = reader
        self.stream = stream
        self.schema = reader.schema

    def __iter__(self) -> Iterator[Any]:
        if self.stream:
            yield from self.reader
        else:
            for i in range(self.reader.num_record_batches):
                yield self.reader.get_batch(i)


@contextlib.contextmanager
def open_arrow(fs: InputFS, url: str) -> Iterator[tuple[bool, _Batches]]:
    """An Arrow IPC file (random access, `ARROW1` magic) or stream (`save_to_disk`).

    Read, not memory-mapped: mapped pages of a multi-GB file would all count as resident memory.
    """
    import pyarrow as pa

    path = fs.local_path(url)
    with contextlib.ExitStack() as stack:
        source: Any = stack.enter_context(pa.OSFile(path) if path else fs.open(url))
        stream = source.read(6) != b"ARROW1"
        source.seek(0)
        reader = pa.ipc.open_stream(source) if stream else pa.ipc.open_file(source)
        yield stream, _Batches(reader, stream)
