"""Reading the documents of one piece: the piece's format module does the reading (see formats/).

`PieceReader` is what a task holds: `docs()` yields documents and unusable records in order, `where()`
names a position the way a user can find it (file:line, file row N, file).
"""

from __future__ import annotations

from collections.abc import Iterator

from storekit.pipeline.formats import format_named
from storekit.pipeline.formats.base import EMPTY, OVERSIZED, Doc, PieceContext

__all__ = ["EMPTY", "OVERSIZED", "Doc", "PieceReader"]  # what a task needs besides the reader


class PieceReader(PieceContext):
    """Documents of one piece, plus `where()` to name a position the way a user can find it."""

    def docs(self) -> Iterator[Doc]:
        return format_named(self.src.format).read(self)

    def where(self, position: int) -> str:
        return format_named(self.src.format).where(self, position)
