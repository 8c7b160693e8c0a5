"""Parquet (`.parquet`, `.pq`): pieces are row ranges along row groups, read page by page."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from storekit.config import mask_url
from storekit.errors import InputError
from storekit.pipeline.formats.base import Doc, PieceContext, SourceFile
from storekit.pipeline.formats.columnar import Columnar, check_column, columns, rows_of
from storekit.pipeline.inputs import InputFS


class Parquet(Columnar):
    name = "parquet"
    suffixes = (".parquet", ".pq")

    def describe(
        self, fs: InputFS, common: dict[str, Any], compression: str | None, text_key: str
    ) -> SourceFile:
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
        check_column(url, names, text_key)
        return SourceFile(**common, data_size=sum(b for _, b in chunks), chunks=chunks)

    def read(self, ctx: PieceContext) -> Iterator[Doc]:
        import pyarrow.parquet as pq

        start, end = ctx.piece.start, ctx.piece.end if ctx.piece.end is not None else ctx.src.rows
        with ctx.fs.open(ctx.src.url) as fh:
            # buffered page-by-page reads: a huge row group is never held in memory whole
            pf = pq.ParquetFile(fh, buffer_size=8 << 20, pre_buffer=False)
            cols = columns(ctx, pf.schema_arrow.names)
            first = 0
            for group, (rows, _) in enumerate(ctx.src.chunks):
                if first + rows > start and first < end:
                    row = first
                    for batch in pf.iter_batches(
                        batch_size=4096, row_groups=[group], columns=cols, use_threads=False
                    ):
                        yield from rows_of(ctx, batch, row, start, end)
                        row += batch.num_rows
                first += rows
                if first >= end:
                    break


FORMAT = Parquet()
