"""What every input format provides (`InputFormat`) and the records the formats share.

A format module knows three things about its files: how to describe one for the planner (sizes, row
groups), how to split one into pieces a task can start at, and how to read the documents of a piece.
The records here are plain data: the plan file stores them, so their fields stay as they are.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from storekit.config import mask_url
from storekit.pipeline.inputs import InputFS

if TYPE_CHECKING:
    from storekit.pipeline.giant import GiantText

# why a record is not a document (counted, and named in --on-error fail messages)
MALFORMED = "malformed_json"
INVALID_UTF8 = "invalid_utf8"
MISSING = "missing_field"
NON_STRING = "non_string"
EMPTY = "empty"
OVERSIZED = "oversized"
TRUNCATED = "truncated_input"


@dataclass(frozen=True, kw_only=True)
class SourceFile:
    url: str  # absolute local path, s3://bucket/key or bundled:NAME
    size: int  # bytes as stored
    format: str  # a registry name: jsonl | parquet | arrow | text
    compression: str | None = None  # gz | zst (jsonl and text)
    data_size: int = 0  # uncompressed bytes (jsonl/text) or uncompressed column bytes (parquet/arrow)
    chunks: tuple[tuple[int, int], ...] = ()  # (rows, bytes) per row group / record batch
    arrow_stream: bool = False  # Arrow IPC stream (save_to_disk) rather than the random-access file format
    mtime: float | None = None  # only to notice a changed input on resume; never in the manifest

    @property
    def display(self) -> str:
        return mask_url(self.url)

    @property
    def rows(self) -> int:
        return sum(r for r, _ in self.chunks)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> SourceFile:
        doc = dict(doc)
        doc["chunks"] = tuple(tuple(c) for c in doc.get("chunks", ()))
        return cls(**doc)


@dataclass(frozen=True)
class Piece:
    source: int  # index into PrepPlan.sources
    start: int  # byte offset (jsonl, uncompressed) or first row (parquet/arrow); 0 for text
    end: int | None  # exclusive; None = to the end of the source
    est_bytes: int


class Doc(NamedTuple):
    text: str | None  # None: unusable (see reason), or a giant document (see giant)
    reason: str | None
    detail: str
    position: int  # jsonl: byte offset of the line; parquet/arrow: row; text: 0
    meta: dict[str, Any] | None
    nbytes: int  # input bytes this record took (for progress)
    giant: GiantText | None = None  # several MiB of text, decoded in chunks when needed


class PieceContext:
    """One piece to read and the options reading needs (what a format's `read` gets)."""

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


class InputFormat(ABC):
    name: str
    suffixes: tuple[str, ...] = ()  # lower-case file name endings (after any .gz/.zst)
    compressible = True  # may come as .gz/.zst (parquet and arrow compress internally)
    # pieces are byte ranges that reading aligns itself, and an uncompressed file's data size is its
    # size: a file that changed needs only its new size and mtime in the plan (see `restated`)
    restatable = False

    @abstractmethod
    def describe(
        self, fs: InputFS, common: dict[str, Any], compression: str | None, text_key: str
    ) -> SourceFile:
        """The SourceFile the planner needs; `common` holds url, size, mtime and format."""

    def split(self, index: int, src: SourceFile, target: int) -> list[Piece]:
        """Pieces of about `target` uncompressed bytes; by default the whole file is one piece."""
        return [Piece(index, 0, None, src.data_size)]

    @abstractmethod
    def read(self, ctx: PieceContext) -> Iterator[Doc]:
        """The documents (and unusable records) of one piece, in order."""

    def restated(self, src: SourceFile, size: int, mtime: float | None) -> SourceFile | None:
        """`src` in a plan none of whose finished tasks read it, after its file changed to `size`
        bytes; None where the plan cannot follow (pieces of rows, or a compressed file's data size)."""
        if not self.restatable or src.compression:
            return None
        return replace(src, size=size, mtime=mtime, data_size=size)

    def where(self, ctx: PieceContext, position: int) -> str:
        """A position of `read` named the way a user finds it."""
        return ctx.src.display
