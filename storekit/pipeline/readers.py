"""Reading the documents of one piece of a source: jsonl, parquet, arrow, text files.

Each reader yields `Doc`s: the text (or the reason it is unusable), the kept metadata fields and a
position that `where()` turns into `file:line N` (or `row N`) for messages. Memory is bounded:
lines and record batches are streamed, never whole files.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import IO, Any, NamedTuple

import orjson

from storekit.errors import InputError
from storekit.pipeline.giant import GIANT_BYTES, GiantText, blank_text, locate_text
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.plan import Piece
from storekit.pipeline.sources import SourceFile
from storekit.pipeline.streams import Decompressed, TruncatedInput, count_newlines, iter_lines, open_stream

MALFORMED = "malformed_json"
INVALID_UTF8 = "invalid_utf8"
MISSING = "missing_field"
NON_STRING = "non_string"
EMPTY = "empty"
OVERSIZED = "oversized"
TRUNCATED = "truncated_input"


class Doc(NamedTuple):
    text: str | None  # None: unusable (see reason), or a giant document (see giant)
    reason: str | None
    detail: str
    position: int  # jsonl: byte offset of the line; parquet/arrow: row; text: 0
    meta: dict[str, Any] | None
    nbytes: int  # input bytes this record took (for progress)
    giant: GiantText | None = None  # several MiB of text, decoded in chunks when needed


class PieceReader:
    """Documents of one piece, plus `where()` to name a position the way a user can find it."""

    def __init__(
        self,
        fs: InputFS,
        src: SourceFile,
        piece: Piece,
        *,
        text_key: str,
        keep_fields: Sequence[str],
        max_doc_bytes: int,
    ) -> None:
        self.fs = fs
        self.src = src
        self.piece = piece
        self.text_key = text_key
        self.keep_fields = tuple(keep_fields)
        self.max_doc_bytes = max_doc_bytes

    def docs(self) -> Iterator[Doc]:
        fmt = self.src.format
        if fmt == "jsonl":
            return self._jsonl()
        if fmt == "text":
            return self._text()
        if fmt == "parquet":
            return self._parquet()
        return self._arrow()

    def where(self, position: int) -> str:
        if self.src.format == "jsonl":
            return f"{self.src.display}:{self._line_of(position)}"
        if self.src.format in ("parquet", "arrow"):
            return f"{self.src.display} row {position}"
        return self.src.display

    def _line_of(self, offset: int) -> int:
        with self.fs.open(self.src.url) as raw:
            return count_newlines(open_stream(raw, self.src.compression), offset) + 1

    # -- jsonl -----------------------------------------------------------------------------------
    def _jsonl(self) -> Iterator[Doc]:
        loads, key, keep = orjson.loads, self.text_key, self.keep_fields
        decode_error = orjson.JSONDecodeError
        span = None if self.piece.end is None else self.piece.end - self.piece.start
        block = 8 << 20 if span is None or self.src.compression else min(8 << 20, span + (128 << 10))
        with self.fs.open(self.src.url, block_size=block) as raw:
            stream = open_stream(raw, self.src.compression)
            lines = iter_lines(stream, self.piece.start, self.piece.end, self.max_doc_bytes)
            offset = self.piece.start
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
                    if length > GIANT_BYTES:
                        whole = line if isinstance(line, bytes) else bytes(line)
                        del line
                        found = self._giant_line(whole, offset, length)
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
                if (self.piece.end is None or exc.offset < self.piece.end) and exc.offset >= self.piece.start:
                    yield Doc(
                        None,
                        TRUNCATED,
                        f"{exc} after {exc.offset} bytes",
                        max(offset, exc.offset),
                        None,
                        0,
                    )

    def _giant_line(self, raw: bytes, offset: int, length: int) -> Doc | None:
        """A line whose text field is several MiB: keep the bytes, parse only the small rest."""
        span = locate_text(raw, self.text_key)
        if span is None:
            return None  # not an object with a string text field: the normal path reports why
        try:
            rest = orjson.loads(blank_text(raw, span))
        except orjson.JSONDecodeError:
            return None
        meta = {f: rest.get(f) for f in self.keep_fields} if self.keep_fields else None
        return Doc(
            None, None, "", offset, meta, length + 1, GiantText(raw, span[0], span[1], json_escaped=True)
        )

    # -- text files: one document per file ----------------------------------------------------------
    def _text(self) -> Iterator[Doc]:
        cap = self.max_doc_bytes
        with self.fs.open(self.src.url) as raw:
            stream: IO[bytes] | Decompressed = open_stream(raw, self.src.compression)
            try:
                data = stream.read(cap + 1)
            except TruncatedInput as exc:
                yield Doc(None, TRUNCATED, str(exc), 0, None, self.src.size)
                return
        if len(data) > cap:
            yield Doc(
                None, OVERSIZED, f"file larger than --max-doc-bytes ({cap} bytes)", 0, None, self.src.size
            )
            return
        meta = {f: (self.src.display if f == "path" else None) for f in self.keep_fields} or None
        if len(data) > GIANT_BYTES:
            yield Doc(None, None, "", 0, meta, len(data), GiantText(data, 0, len(data), json_escaped=False))
            return
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield Doc(None, INVALID_UTF8, f"{exc.reason} at byte {exc.start}", 0, None, self.src.size)
            return
        yield Doc(text, None, "", 0, meta, len(data))

    # -- parquet and arrow: row ranges ------------------------------------------------------------
    def _columns(self, names: Sequence[str]) -> list[str]:
        return [self.text_key, *[f for f in self.keep_fields if f in names and f != self.text_key]]

    def _parquet(self) -> Iterator[Doc]:
        import pyarrow.parquet as pq

        start, end = self.piece.start, self.piece.end if self.piece.end is not None else self.src.rows
        with self.fs.open(self.src.url) as fh:
            # buffered page-by-page reads: a huge row group is never held in memory whole
            pf = pq.ParquetFile(fh, buffer_size=8 << 20, pre_buffer=False)
            cols = self._columns(pf.schema_arrow.names)
            first = 0
            for group, (rows, _) in enumerate(self.src.chunks):
                if first + rows > start and first < end:
                    row = first
                    for batch in pf.iter_batches(
                        batch_size=4096, row_groups=[group], columns=cols, use_threads=False
                    ):
                        yield from self._rows(batch, row, start, end)
                        row += batch.num_rows
                first += rows
                if first >= end:
                    break

    def _arrow(self) -> Iterator[Doc]:
        start, end = self.piece.start, self.piece.end if self.piece.end is not None else self.src.rows
        with open_arrow(self.fs, self.src.url) as (_stream, batches):
            row = 0
            for batch in batches:
                if row >= end:
                    break
                if row + batch.num_rows > start:
                    cols = self._columns(batch.schema.names)
                    yield from self._rows(batch.select(cols), row, start, end)
                row += batch.num_rows

    def _rows(self, batch: Any, first_row: int, start: int, end: int) -> Iterator[Doc]:
        lo, hi = max(start - first_row, 0), min(end - first_row, batch.num_rows)
        if hi <= lo:
            return
        batch = batch.slice(lo, hi - lo)
        texts = _column_values(batch.column(0))
        metas: list[dict[str, Any]] | None = None
        if self.keep_fields:
            present = {name: batch.column(name).to_pylist() for name in batch.schema.names[1:]}
            metas = [
                {f: (present[f][k] if f in present else None) for f in self.keep_fields}
                for k in range(hi - lo)
            ]
        cap, key = self.max_doc_bytes, self.text_key
        for k, text in enumerate(texts):
            row = first_row + lo + k
            meta = metas[k] if metas is not None else None
            if type(text) is str:
                size = len(text)
                if size * 4 > cap and len(text.encode("utf-8", "surrogatepass")) > cap:
                    yield Doc(
                        None, OVERSIZED, f"text of {size} characters > --max-doc-bytes", row, None, size
                    )
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
