"""What the columnar formats (parquet, arrow) share: row-range pieces along row groups / record
batches, the columns to read, and turning a batch's rows into documents."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from storekit.config import mask_url
from storekit.errors import InputError
from storekit.pipeline.formats.base import (
    INVALID_UTF8,
    MISSING,
    NON_STRING,
    OVERSIZED,
    Doc,
    InputFormat,
    Piece,
    PieceContext,
    SourceFile,
)


class Columnar(InputFormat):
    compressible = False

    def split(self, index: int, src: SourceFile, target: int) -> list[Piece]:
        if src.data_size <= target:
            return [Piece(index, 0, src.rows, src.data_size)]
        return split_rows(index, src, target)

    def where(self, ctx: PieceContext, position: int) -> str:
        return f"{ctx.src.display} row {position}"


def split_rows(index: int, src: SourceFile, target: int) -> list[Piece]:
    """Row ranges along row groups / record batches; a chunk far above target is cut by rows."""
    pieces: list[Piece] = []
    row = start = 0
    acc = 0
    for rows, nbytes in src.chunks:
        if nbytes > 2 * target and rows > 1:
            if acc:
                pieces.append(Piece(index, start, row, acc))
            n = min(rows, -(-nbytes // target))
            cuts = [row + rows * k // n for k in range(n + 1)]
            pieces.extend(Piece(index, cuts[k], cuts[k + 1], nbytes // n) for k in range(n))
            row += rows
            start, acc = row, 0
            continue
        row += rows
        acc += nbytes
        if acc >= target:
            pieces.append(Piece(index, start, row, acc))
            start, acc = row, 0
    if row > start or not pieces:
        pieces.append(Piece(index, start, row, acc))
    return pieces


def check_column(url: str, names: Sequence[str], text_key: str) -> None:
    if text_key not in names:
        raise InputError(
            f"{mask_url(url)}: no column {text_key!r} (columns: {', '.join(names) or 'none'})",
            hint="choose the text column with --text-key",
        )


def columns(ctx: PieceContext, names: Sequence[str]) -> list[str]:
    return [ctx.text_key, *[f for f in ctx.keep_fields if f in names and f != ctx.text_key]]


def rows_of(ctx: PieceContext, batch: Any, first_row: int, start: int, end: int) -> Iterator[Doc]:
    lo, hi = max(start - first_row, 0), min(end - first_row, batch.num_rows)
    if hi <= lo:
        return
    batch = batch.slice(lo, hi - lo)
    texts = _column_values(batch.column(0))
    metas: list[dict[str, Any]] | None = None
    if ctx.keep_fields:
        present = {name: batch.column(name).to_pylist() for name in batch.schema.names[1:]}
        metas = [
            {f: (present[f][k] if f in present else None) for f in ctx.keep_fields} for k in range(hi - lo)
        ]
    cap, key = ctx.max_doc_bytes, ctx.text_key
    for k, text in enumerate(texts):
        row = first_row + lo + k
        meta = metas[k] if metas is not None else None
        if type(text) is str:
            size = len(text)
            if size * 4 > cap and len(text.encode("utf-8", "surrogatepass")) > cap:
                yield Doc(None, OVERSIZED, f"text of {size} characters > --max-doc-bytes", row, None, size)
            else:
                yield Doc(text, None, "", row, meta, size)
        elif text is None:
            yield Doc(None, MISSING, f"{key!r} is null", row, None, 0)
        elif isinstance(text, _Invalid):
            yield Doc(None, INVALID_UTF8, text.detail, row, None, 0)
        else:
            yield Doc(None, NON_STRING, f"{key!r} is a {type(text).__name__}, not a string", row, None, 0)


class _Invalid(NamedTuple):
    detail: str


def _column_values(column: Any) -> list[Any]:
    """Python values of the text column; binary is decoded, undecodable values are marked."""
    import pyarrow as pa

    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        out: list[Any] = []
        for value in column.to_pylist():
            if value is None:
                out.append(None)
                continue
            try:
                out.append(value.decode("utf-8"))
            except UnicodeDecodeError as exc:
                out.append(_Invalid(f"{exc.reason} at byte {exc.start}"))
        return out
    try:
        return list(column.to_pylist())
    except (UnicodeDecodeError, pa.ArrowException) as exc:
        raise InputError(f"text column is not valid UTF-8 ({exc})") from None
