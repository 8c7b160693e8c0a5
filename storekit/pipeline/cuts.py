"""Where long documents are cut for encoding, and the stripped-text hash: numpy-free, so that
planning (which reads inputs through the formats) does not import numpy; a Slurm submission's
sbatch comes that much sooner (storekit/pipeline/submit.py)."""

from __future__ import annotations

import itertools
import re

import xxhash

PIECE_CHARS = 128 * 1024  # encode long documents in pieces of about this many characters (~17 MB peak)
# the most characters encoded as one piece (~550 MB in `tokenizers`): a document no rule may cut, or a
# stretch of one without a place its rule allows (CJK text has none), is encoded whole up to this
# length; longer, it is refused (`refusal`), never cut elsewhere
WHOLE_MAX_CHARS = 4 << 20
# Cut rules, one per pre-tokenizer family; a cut before position i is allowed where the family's regex
# matches there. Both rules need text[i-1] and text[i] ASCII, which no Unicode normalisation composes
# with anything, and neither regex family looks behind, so the pre-tokens after the cut start where
# they start in the whole text; what each rule adds is why no pre-token runs across i:
# - gpt2 (ByteLevel with its regex): text[i-1] printable, text[i] ASCII whitespace. No alternative runs
#   from a non-space into whitespace, and `\s+(?!\S)` sees whitespace at i either way.
# - split (Split with a Llama-3 / Qwen 2 / tekken / o200k regex, then ByteLevel without regex): those
#   regexes join punctuation with the newlines after it (`[^\s\p{L}\p{N}]+[\r\n]*`), so only a space
#   or tab may follow the printable character; or text[i-1] a newline and text[i] an ASCII letter or
#   digit: `\s*[\r\n]+` (tried before `\s+(?!\S)`) ends a whitespace run at its last newline and no
#   alternative takes a newline before a letter or digit.
# Any other pre-tokenizer (Metaspace, a Prepend/Replace normaliser, add_prefix_space, an unknown regex)
# has no rule: its documents are encoded whole (see encode.py for the bound).
CUT_RULES: dict[str, re.Pattern[str]] = {
    "gpt2": re.compile(r"(?<=[!-~])(?=[ \t\r\n])"),
    "split": re.compile(r"(?<=[!-~])(?=[ \t])|(?<=[\r\n])(?=[A-Za-z0-9])"),
}
_SAFE_CUT = CUT_RULES["gpt2"]
# Unicode White_Space (what `tokenizers`' Rust side calls whitespace): Python's str.strip() also strips
# U+001C..U+001F, which `tokenizers` encodes as text, so a document made of them is not empty
WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + ("\u2028\u2029\u202f\u205f\u3000")
)
_NON_SPACE = re.compile(f"[^{WHITE_SPACE}]")
_HASH_SLICE = 1 << 20


class Unsplittable(Exception):
    """A long document with no safe place to cut it, or too long to encode whole."""


def refusal(why: str, limit: int) -> Unsplittable:
    """A document that cannot be encoded within `limit` characters at once, with the ways out."""
    return Unsplittable(
        f"{why}; text without a place to cut is encoded whole only up to {limit} characters: "
        f"leave the document out with --max-chars {limit} or --on-error skip"
    )


def cut_points(
    text: str, piece: int | None = None, window: int | None = None, rule: str = "gpt2"
) -> list[int]:
    """Where to cut `text` into pieces of about `piece` characters (default PIECE_CHARS) and at most
    `window` (default WHOLE_MAX_CHARS; both read at call time: tests lower them) by `rule`
    (CUT_RULES); raises Unsplittable for a stretch longer than `window` without a cut."""
    piece = PIECE_CHARS if piece is None else piece
    window = WHOLE_MAX_CHARS if window is None else window
    safe = CUT_RULES[rule]
    cuts: list[int] = []
    start = 0
    while len(text) - start > piece:
        match = safe.search(text, start + piece, start + window)
        if match is None:
            if len(text) - start <= window:
                break  # the rest is the last piece, encoded whole
            raise refusal(
                f"no place the {rule} cut rule allows between characters {start + piece} and "
                f"{start + window}",
                window,
            )
        start = match.start()
        cuts.append(start)
    return cuts


def split_for_encoding(
    text: str, piece: int | None = None, window: int | None = None, rule: str = "gpt2"
) -> list[str]:
    bounds = [0, *cut_points(text, piece, window, rule), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def stripped_hash(text: str) -> int | None:
    """xxh3-128 of the text without leading/trailing White_Space, as UTF-8 (None when empty),
    without copying a long text."""
    if len(text) <= _HASH_SLICE:
        stripped = text.strip(WHITE_SPACE)
        return xxhash.xxh3_128_intdigest(stripped.encode("utf-8", "surrogatepass")) if stripped else None
    first = _NON_SPACE.search(text)
    if first is None:
        return None
    lo, hi = first.start(), len(text)
    while text[hi - 1] in WHITE_SPACE:
        hi -= 1
    digest = xxhash.xxh3_128()
    for k in range(lo, hi, _HASH_SLICE):
        digest.update(text[k : min(k + _HASH_SLICE, hi)].encode("utf-8", "surrogatepass"))
    return int(digest.intdigest())
