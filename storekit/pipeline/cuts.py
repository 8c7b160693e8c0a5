"""Where long documents are cut for encoding, and the stripped-text hash: numpy-free, so that
planning (which reads inputs through the formats) does not import numpy; a Slurm submission's
sbatch comes that much sooner (storekit/slurm/prepare.py)."""

from __future__ import annotations

import itertools
import re

import xxhash

PIECE_CHARS = 128 * 1024  # encode long documents in pieces of about this many characters (~17 MB peak)
CUT_WINDOW = 16 * PIECE_CHARS  # no safe cut within this many characters: the document is refused
# A cut before position i is safe when text[i-1] is printable ASCII and text[i] is ASCII whitespace:
# no alternative of the GPT-2 split regex runs from a non-space character into whitespace, the regex
# never looks behind, and Unicode normalisation never composes across those characters.
_SAFE_CUT = re.compile(r"(?<=[!-~])(?=[ \t\r\n])")
_NON_SPACE = re.compile(r"\S")
_HASH_SLICE = 1 << 20


class Unsplittable(Exception):
    """A long document with no safe place to cut it within CUT_WINDOW characters."""


def cut_points(text: str, piece: int = PIECE_CHARS, window: int = CUT_WINDOW) -> list[int]:
    """Where to cut `text` into pieces of about `piece` characters; raises Unsplittable."""
    cuts: list[int] = []
    start = 0
    while len(text) - start > piece:
        match = _SAFE_CUT.search(text, start + piece, start + window)
        if match is None:
            raise Unsplittable(
                f"no whitespace to cut at between characters {start + piece} and {start + window}"
            )
        start = match.start()
        cuts.append(start)
    return cuts


def split_for_encoding(text: str, piece: int = PIECE_CHARS, window: int = CUT_WINDOW) -> list[str]:
    bounds = [0, *cut_points(text, piece, window), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def stripped_hash(text: str) -> int | None:
    """xxh3-128 of text.strip() as UTF-8 (None when empty), without copying a long text."""
    if len(text) <= _HASH_SLICE:
        stripped = text.strip()
        return xxhash.xxh3_128_intdigest(stripped.encode("utf-8", "surrogatepass")) if stripped else None
    first = _NON_SPACE.search(text)
    if first is None:
        return None
    lo, hi = first.start(), len(text)
    while text[hi - 1].isspace():
        hi -= 1
    digest = xxhash.xxh3_128()
    for k in range(lo, hi, _HASH_SLICE):
        digest.update(text[k : min(k + _HASH_SLICE, hi)].encode("utf-8", "surrogatepass"))
    return int(digest.intdigest())
