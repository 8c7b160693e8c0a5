"""Batch encoding into one flat numpy array per batch, EOS/BOS added here (not by the tokenizer).

Memory: `tokenizers` needs about 130 bytes per input character while it encodes one document, so a
long document is encoded in pieces of `PIECE_CHARS` cut where the tokenizer's cut rule
(`TokenizerInfo.cut_rule`, `cuts.CUT_RULES`) proves the ids are those of the whole text; a stretch
without such a place is one piece of up to `cuts.WHOLE_MAX_CHARS`. A tokenizer with no rule
(Metaspace, Prepend, ...) gets every document whole, up to `cuts.WHOLE_MAX_CHARS` characters; a
longer one is refused (`check_whole`), never cut.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from storekit.pipeline import cuts
from storekit.pipeline.cuts import cut_points
from storekit.pipeline.giant import GiantText, pieces
from storekit.pipeline.tokenizer import TokenizerInfo, load_tokenizer


class Encoder:
    """Encodes batches of documents into (tokens, lengths) with the plan's engine (`info.engine`).

    Both engines give the same ids (the fast one is used only where that is proven, see
    storekit.pipeline.engines); literal special-token strings are counted here, with either engine.
    """

    def __init__(self, info: TokenizerInfo, tokenizer: Any = None, *, special_as_text: bool = False) -> None:
        self.info = info
        self.fast = None
        added: list[Any]
        if info.engine == "tiktoken":
            from storekit.pipeline.engines import fast_encoder

            # no `tokenizers` load here: the compiled form has the added tokens (Slurm elements start
            # many processes, each would pay ~0.1 s for it); the fast engine loads it if it must
            self.fast = fast_encoder(info, special_as_text=special_as_text)
            added = list(self.fast.compiled.added)
        else:
            if tokenizer is None:
                tokenizer = load_tokenizer(info, special_as_text=special_as_text)
            added = list(tokenizer.get_added_tokens_decoder().values())
        self.tokenizer = tokenizer  # None with the fast engine
        self._specials = _special_regex(added)
        self.special_strings = 0  # literal special-token strings seen in documents
        self.dtype = np.dtype(np.uint16 if info.dtype == "uint16" else np.int32)
        self.eos = info.eos_id
        self.bos = info.bos_id
        self.cut = info.cut_rule
        self.long_chars = cuts.PIECE_CHARS * 2 if self.cut is not None else None
        self.hf_documents = 0  # documents (not pieces) the fast engine handed to `tokenizers`
        self.last_hf: list[int] = []  # which documents of the last encode_batch/encode_pieces call did
        # (document of the last call, literal special-token strings in it) for those with any
        self.last_specials: list[tuple[int, int]] = []
        self.encode_seconds = 0.0  # inside the tokenizer
        self.ids_seconds = 0.0  # Encoding.ids -> one numpy array (the Python-side cost of encoding)

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, list[int]]:
        """All documents' ids back to back (with BOS/EOS), and each document's length in tokens."""
        self.last_specials = [(k, n) for k, n in enumerate(self._count_specials(texts)) if n]
        t0 = time.perf_counter()
        encodings: list[Any]
        if self.fast is not None:
            encodings, self.last_hf = [], []
            for k, text in enumerate(texts):
                before = self.fast.hf_documents
                encodings.append(self.fast.encode_ids(text))  # a uint32 array
                if self.fast.hf_documents != before:
                    self.last_hf.append(k)
            self.hf_documents += len(self.last_hf)
        else:
            encodings = [
                enc.ids for enc in self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
            ]
        t1 = time.perf_counter()
        head = [np.array([self.bos], dtype=np.uint32)] if self.bos is not None else []
        tail = [np.array([self.eos], dtype=np.uint32)] if self.eos is not None else []
        parts: list[Any] = []
        lengths: list[int] = []
        for ids in encodings:
            parts += (*head, ids, *tail)
            lengths.append(len(ids) + len(head) + len(tail))
        del encodings
        # one pass into the shard's dtype (ids fit it: the dtype is chosen from the vocabulary size)
        out = np.concatenate(parts, dtype=self.dtype, casting="unsafe") if parts else np.zeros(0, self.dtype)
        self.encode_seconds += t1 - t0
        self.ids_seconds += time.perf_counter() - t1
        return out, lengths

    def encodes_nothing(self, text: str) -> bool:
        """Whether the tokenizer gives `text` no tokens at all (counts nothing)."""
        if self.fast is not None:
            return len(self.fast.encode_ids(text)) == 0
        return not self.tokenizer.encode(text, add_special_tokens=False).ids

    def _count_specials(self, texts: Sequence[str]) -> list[int]:
        if self._specials is None:
            return [0] * len(texts)
        search = self._specials.findall
        counts = [len(search(t)) for t in texts]
        self.special_strings += sum(counts)
        return counts

    def is_long(self, text: str) -> bool:
        return self.long_chars is not None and len(text) > self.long_chars

    def encode_long(self, text: str, write: Callable[[np.ndarray], None]) -> int:
        """One long document, encoded piece by piece and handed to `write` as it goes: bounded memory.

        Raises Unsplittable before anything is written. Returns the document's length in tokens.
        """
        assert self.cut is not None  # is_long() is false without a cut rule
        bounds = [0, *cut_points(text, rule=self.cut), len(text)]
        return self.encode_pieces((text[a:b] for a, b in itertools.pairwise(bounds)), write)

    def check_whole(self, chars: int) -> None:
        """Raises Unsplittable for a document this tokenizer can neither cut nor encode whole."""
        limit = cuts.WHOLE_MAX_CHARS  # read per call: tests lower it
        if self.cut is None and chars > limit:
            raise cuts.refusal(
                f"{chars} characters: tokenizer {self.info.name} has no proven place to cut a document "
                f"(pre-tokenizer without a cut rule; a byte-level BPE tokenizer has one)",
                limit,
            )

    def encode_giant(self, text: GiantText, write: Callable[[np.ndarray], None]) -> int:
        """A giant document (measured and checked before): in pieces where the cut rule allows, else
        decoded and encoded whole (check_whole bounds its size)."""
        if self.cut is not None:
            return self.encode_pieces(pieces(text.chunks(), self.cut), write)
        whole = "".join(text.chunks())
        return self.encode_pieces(iter((whole,)), write)

    def encode_pieces(self, pieces: Iterator[str], write: Callable[[np.ndarray], None]) -> int:
        """A document given as safe pieces (see cut_points), with BOS/EOS; returns its length in tokens."""
        total = 0
        hf_before = self.fast.hf_documents if self.fast is not None else 0
        if self.bos is not None:
            write(np.array([self.bos], dtype=self.dtype))
            total += 1
        specials = 0
        for piece in pieces:
            specials += self._count_specials((piece,))[0]
            t0 = time.perf_counter()
            if self.fast is not None:
                raw = self.fast.encode_ids(piece)
            else:
                (enc,) = self.tokenizer.encode_batch_fast([piece], add_special_tokens=False)
                raw = enc.ids
                del enc
            t1 = time.perf_counter()
            ids = np.array(raw, dtype=self.dtype)
            del raw
            self.encode_seconds += t1 - t0
            self.ids_seconds += time.perf_counter() - t1
            write(ids)
            total += len(ids)
        if self.eos is not None:
            write(np.array([self.eos], dtype=self.dtype))
            total += 1
        # one document, however many of its pieces went to `tokenizers`
        self.last_hf = [0] if self.fast is not None and self.fast.hf_documents != hf_before else []
        self.last_specials = [(0, specials)] if specials else []
        self.hf_documents += len(self.last_hf)
        return total


def _special_regex(added: list[Any]) -> re.Pattern[str] | None:
    """Literal occurrences of the special tokens' text (leftmost-longest, like `tokenizers`); `added`:
    `tokenizers` AddedToken objects or fastbpe's, which are read from them."""
    specials = sorted(
        {str(t.content) for t in added if t.special and t.content},
        key=lambda c: (-len(c), c),
    )
    return re.compile("|".join(re.escape(c) for c in specials)) if specials else None
