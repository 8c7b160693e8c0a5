"""Batch encoding into one flat numpy array per batch, EOS/BOS added here (not by the tokenizer).

Memory: `tokenizers` needs about 130 bytes per input character while it encodes one document, so a
long document is encoded in pieces of `PIECE_CHARS` cut where no pre-token can straddle the cut
(`safe_cut`). That gives the same ids as encoding it whole, for byte-level BPE (`splittable`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from storekit.pipeline.tokenizer import TokenizerInfo, load_tokenizer

PIECE_CHARS = 128 * 1024  # encode long documents in pieces of about this many characters (~17 MB peak)
CUT_WINDOW = 8 * PIECE_CHARS  # no safe cut within this many characters: the document is refused
# A cut before position i is safe when (a) text[i-2:i] is "<printable ASCII>\n" and text[i] is printable
# ASCII, or (b) text[i] is a space between two printable ASCII characters.
_SAFE_CUT = re.compile(r"(?<=[!-~]\n)(?=[!-~])|(?<=[!-~])(?= [!-~])")


class Unsplittable(Exception):
    """A long document with no safe place to cut it within CUT_WINDOW characters."""


def split_for_encoding(text: str, piece: int = PIECE_CHARS, window: int = CUT_WINDOW) -> list[str]:
    pieces: list[str] = []
    start = 0
    while len(text) - start > piece:
        match = _SAFE_CUT.search(text, start + piece, start + window)
        if match is None:
            raise Unsplittable(
                f"no whitespace to cut at between characters {start + piece} and {start + window}"
            )
        cut = match.start()
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


class Encoder:
    """Encodes batches of documents into (tokens, lengths), one worker process per core."""

    def __init__(self, info: TokenizerInfo, tokenizer: Any = None) -> None:
        self.info = info
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(info)
        self.dtype = np.dtype(np.uint16 if info.dtype == "uint16" else np.int32)
        self.eos = info.eos_id
        self.bos = info.bos_id
        self.long_chars = PIECE_CHARS * 2 if info.splittable else None
        self.encode_seconds = 0.0  # inside the tokenizer
        self.ids_seconds = 0.0  # Encoding.ids -> one numpy array (the Python-side cost of encoding)

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, list[int]]:
        """All documents' ids back to back (with BOS/EOS), and each document's length in tokens."""
        flat: list[int] = []
        extend = flat.extend
        lengths: list[int] = []
        add_len = lengths.append
        bos, eos = self.bos, self.eos
        extra = (bos is not None) + (eos is not None)
        t0 = time.perf_counter()
        encodings = self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        t1 = time.perf_counter()
        for enc in encodings:
            ids = enc.ids
            if bos is not None:
                flat.append(bos)
            extend(ids)
            if eos is not None:
                flat.append(eos)
            add_len(len(ids) + extra)
        del encodings
        out = np.array(flat, dtype=self.dtype)
        self.encode_seconds += t1 - t0
        self.ids_seconds += time.perf_counter() - t1
        return out, lengths

    def is_long(self, text: str) -> bool:
        return self.long_chars is not None and len(text) > self.long_chars

    def encode_long(self, text: str) -> np.ndarray:
        """One long document, encoded piece by piece so memory stays bounded. Raises Unsplittable."""
        parts: list[np.ndarray] = []
        if self.bos is not None:
            parts.append(np.array([self.bos], dtype=self.dtype))
        for piece in split_for_encoding(text):
            t0 = time.perf_counter()
            (enc,) = self.tokenizer.encode_batch_fast([piece], add_special_tokens=False)
            t1 = time.perf_counter()
            parts.append(np.array(enc.ids, dtype=self.dtype))
            self.encode_seconds += t1 - t0
            self.ids_seconds += time.perf_counter() - t1
        if self.eos is not None:
            parts.append(np.array([self.eos], dtype=self.dtype))
        return np.concatenate(parts)
