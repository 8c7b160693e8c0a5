"""A byte-level BPE `tokenizer.json` compiled for tiktoken's core: the same ids, several times faster.

`compile_fast(doc)` either returns a `FastBPE` or raises `NotCompilable` naming the first thing it
cannot reproduce exactly. What it accepts, and why each part is exact:

- normalizer: none, NFC, NFKC or a Sequence of them. Text made only of characters no normalisation
  changes (`unicode_tables.INERT`, ASCII first) is used as is; anything else goes through a
  `tokenizers.normalizers` object of the same steps (neither takes a parameter, and a Sequence of
  one is that one), so `tokenizers`' Unicode version is the one that applies.
- pre-tokenizer: ByteLevel with its GPT-2 regex, or Split(known regex, Isolated) + ByteLevel without
  regex (Llama 3, Qwen 2, tekken). Every accepted regex matches every character, so tiktoken, which
  encodes only the matches, drops nothing. A document with a character this Python's Unicode does
  not know (`ASSIGNED`) is encoded by `tokenizers` instead: regex classes may differ there.
- model: BPE without dropout, subword prefix/suffix or byte fallback, every merge result in the vocab
  once, ids growing with merge order (tiktoken merges by id), all 256 bytes in the vocab. tiktoken
  emits a whole pre-token that is in the vocab without merging (= `ignore_merges`); for a tokenizer
  without it, every such token must be what its own merges give (checked with `tokenizers`).
- added tokens: split off before normalisation (normalized=false) and after it (normalized=true), by
  leftmost-longest match with single_word/lstrip/rstrip, as `tokenizers`' AddedVocabulary does.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from storekit.durable import write_file_atomic
from storekit.pipeline import unicode_tables
from storekit.pipeline.pretokenizers import GPT2_PATTERN, SPLIT_PATTERNS

NORMALIZERS = ("NFC", "NFKC")
PROOF_VERSION = 1  # bump when the whole-token check changes: cached passes are then ignored
# Rust regex `\s` (White_Space), which `tokenizers` uses for lstrip/rstrip
_WS = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_WS_CHARS = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    chr(c) for c in range(0x2000, 0x200B)
)
_SPACE_AT_START = re.compile(f"[{_WS}]*")
_ASCII_WORD = re.compile(r"[A-Za-z0-9_]")


class NotCompilable(Exception):
    """The tokenizer uses something the fast engine cannot reproduce exactly; the message says what."""


class Unsure(Exception):
    """This document needs `tokenizers` (a character whose regex class may differ, a non-ASCII neighbour
    of a single_word token); the encoder handles it, the caller never sees it."""


def _class(table: Sequence[tuple[int, int]]) -> str:
    return "".join(
        f"{re.escape(chr(a))}-{re.escape(chr(b))}" if b > a else re.escape(chr(a)) for a, b in table
    )


_NOT_INERT = re.compile(f"[^{_class(unicode_tables.INERT)}]")
_UNASSIGNED = re.compile(f"[^{_class(unicode_tables.ASSIGNED)}]")


def _is_word_char(ch: str) -> bool:
    """Rust regex `\\w` on one character; non-ASCII answers are left to `tokenizers` (Unsure)."""
    if ch.isascii():
        return _ASCII_WORD.match(ch) is not None
    raise Unsure(ch)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map, which ByteLevel uses."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in out:
            out[b] = chr(256 + extra)
            extra += 1
    return out


# byte-level symbol -> the character of its byte (then latin-1 gives the byte); any other character
# below 256 -> U+FFFD, which latin-1 cannot encode, so a token outside the alphabet is refused
_TO_LATIN1: dict[int, str] = {c: "\ufffd" for c in range(256)} | {
    ord(c): chr(b) for b, c in bytes_to_unicode().items()
}


@dataclass(frozen=True)
class AddedToken:
    content: str
    id: int
    special: bool
    single_word: bool
    lstrip: bool
    rstrip: bool
    normalized: bool


class AddedSplitter:
    """`tokenizers`' AddedVocabulary.find_matches over one token set (leftmost-longest)."""

    def __init__(self, tokens: Sequence[tuple[str, AddedToken]], *, skip_special: bool) -> None:
        self.by_pattern = {pattern: tok for pattern, tok in tokens}
        ordered = sorted(self.by_pattern, key=lambda p: (-len(p), p))  # longest first = leftmost-longest
        self.regex = re.compile("|".join(re.escape(p) for p in ordered)) if ordered else None
        self.skip_special = skip_special

    def split(self, text: str) -> list[tuple[int | None, str]]:
        """(token id, text) for added tokens and (None, text) for the pieces between them."""
        if self.regex is None or not text:
            return [(None, text)]
        out: list[tuple[int | None, str]] = []
        offset = 0
        for m in self.regex.finditer(text):
            start, stop = m.start(), m.end()
            tok = self.by_pattern[m.group()]
            if self.skip_special and tok.special:
                continue
            if tok.single_word:
                start_ok = start == 0 or not _is_word_char(text[start - 1])
                stop_ok = stop == len(text) or not _is_word_char(text[stop])
                if not (start_ok and stop_ok):
                    continue
            if tok.lstrip:  # back over White_Space, not into what an earlier match took
                while start > offset and text[start - 1] in _WS_CHARS:
                    start -= 1
            if tok.rstrip:
                found = _SPACE_AT_START.match(text, stop)
                stop = found.end() if found else stop
            if offset < start:
                out.append((None, text[offset:start]))
            out.append((tok.id, text[start:stop]))
            offset = stop
        if offset != len(text):
            out.append((None, text[offset:]))
        return out


@dataclass(frozen=True)
class Compiled:
    pattern: str
    pattern_name: str
    ranks: dict[bytes, int]
    normalizers: tuple[str, ...]
    added: tuple[AddedToken, ...]
    ignore_merges: bool


def _fail(why: str) -> NotCompilable:
    return NotCompilable(why)


def _normalizers(doc: dict[str, Any]) -> tuple[str, ...]:
    norm = doc.get("normalizer")
    if norm is None:
        return ()
    items = norm.get("normalizers") or [] if norm.get("type") == "Sequence" else [norm]
    names = tuple(str(n.get("type")) for n in items)
    for name in names:
        if name not in NORMALIZERS:
            raise _fail(f"normalizer {name} (only none, NFC, NFKC and sequences of them are compiled)")
    return names


def _pattern(doc: dict[str, Any]) -> tuple[str, str]:
    pre = doc.get("pre_tokenizer")
    if pre is None:
        raise _fail("no pre-tokenizer (only byte-level BPE is compiled)")
    steps = pre.get("pretokenizers") or [] if pre.get("type") == "Sequence" else [pre]
    if len(steps) == 1 and steps[0].get("type") == "ByteLevel" and steps[0].get("use_regex", True):
        byte_level = steps[0]
        pattern, name = GPT2_PATTERN, "gpt2"
    elif len(steps) == 2 and steps[0].get("type") == "Split" and steps[1].get("type") == "ByteLevel":
        split, byte_level = steps
        if byte_level.get("use_regex", True):
            raise _fail("Split followed by a ByteLevel that splits again (use_regex true)")
        regex = (split.get("pattern") or {}).get("Regex")
        if split.get("behavior") != "Isolated" or split.get("invert"):
            raise _fail(f"Split behaviour {split.get('behavior')} invert={split.get('invert')}")
        named = [n for n, p in SPLIT_PATTERNS.items() if p == regex]
        if not named:
            raise _fail(f"Split regex {str(regex)[:60]!r}... is not one of the proven patterns")
        pattern, name = str(regex), named[0]
    else:
        kinds = "+".join(str(s.get("type")) for s in steps)
        raise _fail(f"pre-tokenizer {kinds} (compiled: ByteLevel, or Split + ByteLevel)")
    if byte_level.get("add_prefix_space"):
        raise _fail("ByteLevel add_prefix_space")
    return pattern, name


def _model_ranks(doc: dict[str, Any]) -> tuple[dict[bytes, int], set[str], bool]:
    """tiktoken ranks (= token ids) and the merge results; raises NotCompilable."""
    model = doc.get("model") or {}
    if model.get("type") != "BPE":
        raise _fail(f"model {model.get('type')} (only BPE is compiled)")
    if model.get("dropout"):
        raise _fail(f"BPE dropout {model.get('dropout')}")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise _fail(f"BPE {key} {model.get(key)!r}")
    if model.get("byte_fallback"):
        raise _fail("BPE byte_fallback")
    if model.get("unk_token") is not None:
        raise _fail(f"BPE unk_token {model.get('unk_token')!r}")
    vocab: dict[str, int] = model.get("vocab") or {}
    decode = {c: b for b, c in bytes_to_unicode().items()}
    missing = [c for c in decode if c not in vocab]
    if missing:
        raise _fail(f"{len(missing)} of the 256 byte symbols are not in the vocabulary")
    merged: list[int] = []
    results: set[str] = set()
    for item in model.get("merges") or []:
        a, b = item.split(" ", 1) if isinstance(item, str) else item
        token = a + b
        if token not in vocab or a not in vocab or b not in vocab:
            raise _fail(f"merge {a!r} {b!r}: a part or the result is not in the vocabulary")
        if token in results:
            raise _fail(f"two merges make {token!r}")
        results.add(token)
        merged.append(vocab[token])
    if any(x >= y for x, y in itertools.pairwise(merged)):
        raise _fail("merge results' ids do not grow with merge order")
    ignore_merges = bool(model.get("ignore_merges"))
    ranks: dict[bytes, int] = {}
    to_bytes = _TO_LATIN1
    for token, token_id in vocab.items():
        if token not in results and not (len(token) == 1 and token in decode):
            if ignore_merges:
                raise _fail(f"vocabulary token {token!r} is neither a byte nor a merge result")
            continue  # the model never emits it without ignore_merges: left out
        try:
            ranks[token.translate(to_bytes).encode("latin-1")] = int(token_id)
        except UnicodeEncodeError:
            raise _fail(f"vocabulary token {token!r} is not made of byte-level symbols") from None
    return ranks, results, ignore_merges


def _added(hf_tokenizer: Any) -> tuple[AddedToken, ...]:
    """The added tokens as the loaded tokenizer holds them (its ids, not always the file's)."""
    out = []
    for token_id, t in sorted(hf_tokenizer.get_added_tokens_decoder().items()):
        if not t.content:
            raise _fail("an added token with empty content")
        out.append(
            AddedToken(
                content=str(t.content),
                id=int(token_id),
                special=bool(t.special),
                single_word=bool(t.single_word),
                lstrip=bool(t.lstrip),
                rstrip=bool(t.rstrip),
                normalized=bool(t.normalized),
            )
        )
    if any(t.rstrip for t in out) and any(re.match(f"[{_WS}]", t.content) for t in out):
        raise _fail("an rstrip added token together with a token that starts with a space")
    return tuple(out)


def _check_collisions(added: Sequence[AddedToken], normalizers: Sequence[str]) -> None:
    """Two normalized added tokens that normalise to the same text: `tokenizers` keeps them in a hash
    map and matches either id, a different one on each load; no compiled choice can be right."""
    normalizer = _normalizer(normalizers)
    seen: dict[str, AddedToken] = {}
    for token in added:
        if not token.normalized:
            continue
        form = token.content if normalizer is None else str(normalizer.normalize_str(token.content))
        other = seen.setdefault(form, token)
        if other is not token:
            raise _fail(
                f"added tokens {other.content!r} (id {other.id}) and {token.content!r} (id {token.id}) "
                f"are the same after normalisation ({'+'.join(normalizers)}): tokenizers picks either id"
            )


def compile_fast(doc: dict[str, Any], hf_tokenizer: Any, *, proof_key: str | None = None) -> Compiled:
    """The compiled form of a parsed tokenizer.json; raises NotCompilable with the reason.

    `proof_key` (the file's xxh3-128): a passed whole-token check is remembered in the user's cache
    (~1 s per 100k tokens with `tokenizers`), so it runs once per tokenizer and machine.
    """
    # (truncation and padding need no check: both engines encode with them off, tokenizer.SWITCHED_OFF)
    normalizers = _normalizers(doc)
    pattern, name = _pattern(doc)
    ranks, _results, ignore_merges = _model_ranks(doc)
    added = _added(hf_tokenizer)
    _check_collisions(added, normalizers)
    if not ignore_merges and not _proven(proof_key):
        _check_whole_tokens(doc, ranks)
        _remember_proof(proof_key)
    return Compiled(
        pattern=pattern,
        pattern_name=name,
        ranks=ranks,
        normalizers=normalizers,
        added=added,
        ignore_merges=ignore_merges,
    )


def _check_whole_tokens(doc: dict[str, Any], ranks: dict[bytes, int]) -> None:
    """tiktoken emits a pre-token found in the vocab as is; without ignore_merges `tokenizers` merges
    it, so every such token must come out of its own merges whole."""
    from tokenizers import Tokenizer

    bare = copy.copy(doc)
    bare.update(
        normalizer=None,
        pre_tokenizer=None,
        post_processor=None,
        decoder=None,
        added_tokens=[],
        truncation=None,
        padding=None,
    )
    model_only = Tokenizer.from_str(json.dumps(bare))
    byte_chars = bytes_to_unicode()
    multi = [(tok, i) for tok, i in ranks.items() if len(tok) > 1]
    strings = ["".join(byte_chars[b] for b in tok) for tok, _ in multi]
    encodings = model_only.encode_batch_fast(strings, add_special_tokens=False)
    for (tok, token_id), enc in zip(multi, encodings, strict=True):
        if enc.ids != [token_id]:
            raise _fail(
                f"without ignore_merges, vocabulary token {tok!r} does not come out of its own merges"
            )


def _proof_file(key: str) -> Path:
    from storekit.cbuild import cache_dir

    return cache_dir() / "fastbpe" / f"whole-tokens-{PROOF_VERSION}-{key}.ok"


def _proven(key: str | None) -> bool:
    return key is not None and _proof_file(key).is_file()


def _remember_proof(key: str | None) -> None:
    """Best effort: a cache that cannot be written only means the check runs again next time."""
    if key is None:
        return
    path = _proof_file(key)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_file_atomic(path, b"whole tokens come out of their own merges\n")


# id(compiled) -> (compiled, its tiktoken cores: one per thread). tiktoken's regexes give the first
# thread that uses them a lock-free path and every other thread a locked one: a core the sample check
# (its own thread) used first encoded ~8 % slower in the task threads and in forked workers, which
# inherit it (benchmarks/RESULTS.md). A core costs ~35 ms and ~14 MB for 65k tokens, freed with its
# thread; a forked child drops what it inherited.
_CORES: dict[int, tuple[Compiled, threading.local]] = {}


def _forget_cores() -> None:
    _CORES.clear()


os.register_at_fork(after_in_child=_forget_cores)

# Ids come back through tiktoken's buffer API (uint32s, no Python int per token: ~15 % less time per
# document than a list made into an array). That API goes through the core's special-token search;
# with no special token at all that search matches the empty string at every character, so the core
# gets one sentinel that is never allowed: a single scan that finds nothing, ids as encode_ordinary's.
_SENTINEL = "\x01storekit: never a special token\x01"
_NONE_ALLOWED: frozenset[str] = frozenset()


def _core_for(compiled: Compiled) -> Any:
    """tiktoken's CoreBPE for `compiled`, built once per thread that encodes (it releases the GIL
    while it encodes, so threads of one process run at once)."""
    entry = _CORES.get(id(compiled))
    if entry is None or entry[0] is not compiled:
        entry = _CORES[id(compiled)] = (compiled, threading.local())
    core = getattr(entry[1], "core", None)
    if core is None:
        import tiktoken

        core = entry[1].core = tiktoken.Encoding(
            "storekit-compiled",
            pat_str=compiled.pattern,
            mergeable_ranks=compiled.ranks,
            special_tokens={_SENTINEL: len(compiled.ranks) + len(compiled.added)},
        )._core_bpe
    return core


def _normalizer(names: Sequence[str]) -> Any:
    """The `tokenizers` normalizer of these steps (see the module docstring), or None."""
    if not names:
        return None
    from tokenizers import normalizers

    steps = [getattr(normalizers, name)() for name in names]
    return steps[0] if len(steps) == 1 else normalizers.Sequence(steps)


class FastBPE:
    """Encodes documents with tiktoken's core; `tokenizers` handles what tiktoken cannot (Unsure).

    `load_hf` gives the loaded `tokenizers.Tokenizer`; it is called at the first Unsure document only,
    so a process whose documents never need it never pays its load (~0.1 s for a 65k vocabulary)."""

    def __init__(self, compiled: Compiled, load_hf: Callable[[], Any], *, special_as_text: bool) -> None:
        self.compiled = compiled  # its tiktoken core is made by the first encode in each thread
        self.load_hf = load_hf
        self.normalizer = _normalizer(compiled.normalizers)
        raw = [(t.content, t) for t in compiled.added if not t.normalized]
        norm = [(self._normalize(t.content), t) for t in compiled.added if t.normalized]
        self.raw_split = AddedSplitter(raw, skip_special=special_as_text)
        self.norm_split = AddedSplitter(norm, skip_special=special_as_text)
        self.hf_documents = 0  # documents handed to `tokenizers` (Unsure)

    def _normalize(self, text: str) -> str:
        if self.normalizer is None or text.isascii() or _NOT_INERT.search(text) is None:
            return text
        return str(self.normalizer.normalize_str(text))

    def encode(self, text: str) -> list[int]:
        """One document's ids (no BOS/EOS), identical to `tokenizers`' encode(add_special_tokens=False)."""
        return self.encode_ids(text).tolist()  # type: ignore[no-any-return]

    def encode_ids(self, text: str) -> np.ndarray:
        """`encode(text)` as a uint32 array."""
        inert = True  # no normalisation changes it, and every character is assigned (INERT ⊂ ASSIGNED)
        try:
            if not text.isascii():
                found = _NOT_INERT.search(text)
                if found is not None:
                    inert = False
                    if _UNASSIGNED.search(text, found.start()) is not None:
                        raise Unsure(text)
            return self._encode(text, inert)
        except Unsure:
            self.hf_documents += 1
            return np.array(self.load_hf().encode(text, add_special_tokens=False).ids, dtype=np.uint32)

    def _encode(self, text: str, inert: bool) -> np.ndarray:
        encode = _core_for(self.compiled).encode_to_tiktoken_buffer  # this thread's core
        parts: list[np.ndarray] = []
        for token_id, piece in self.raw_split.split(text):
            if token_id is not None:
                parts.append(np.array([token_id], dtype=np.uint32))
                continue
            for inner_id, inner in self.norm_split.split(piece if inert else self._normalize(piece)):
                if inner_id is not None:
                    parts.append(np.array([inner_id], dtype=np.uint32))
                elif inner:
                    parts.append(np.frombuffer(encode(inner, _NONE_ALLOWED), dtype=np.uint32))
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)
