"""Giant documents (a jsonl line or a text file of several MiB) without ever holding their text whole.

A Python str costs up to 4 bytes per character (one emoji makes the whole string UCS-4), so a 48 MiB
document would cost ~200 MB as one str on top of its bytes. Here the raw bytes stay as they are and
are decoded in ~1 MiB chunks, twice: a first pass measures, hashes (the same xxh3-128 of the
stripped text as `cuts.stripped_hash`) and checks that the text decodes and can be cut; only then
does the second pass encode it piece by piece, so nothing is written for a document that is refused.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass

import orjson
import xxhash

from storekit.pipeline import cuts

GIANT_BYTES = 4 << 20  # documents above this take the chunked path
CHUNK_BYTES = 1 << 20
_WS = re.compile(rb"[ \t\r\n]*")
_STRUCT = re.compile(rb'[{}\[\]"]')
_LITERAL = re.compile(rb"[^,}\]\s]*")
# a JSON string may be cut for decoding after any printable ASCII byte that cannot be part of an escape
# sequence (\", \\, \/, \b, \f, \n, \r, \t, \uXXXX); non-ASCII bytes may be inside a UTF-8 character.
# Also after any byte but a backslash that the start of a UTF-8 character follows, or the start of an
# escape (a backslash after a non-backslash starts one) that is not the low half of a surrogate pair:
# CJK text has no ASCII, and json.dumps writes every non-ASCII character as an escape
_ESCAPE_BYTES = set(b'"\\/bfnrtu0123456789abcdefABCDEF')
_JSON_CUT = re.compile(
    b"[" + b"".join(re.escape(bytes([c])) for c in range(0x20, 0x7F) if c not in _ESCAPE_BYTES) + b"]"
    rb"|[^\\](?=[\xc0-\xff]|\\(?!u[dD][c-fC-F]))"
)


class BadText(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True)
class GiantText:
    raw: bytes
    start: int
    end: int
    json_escaped: bool  # content of a JSON string (escapes) or plain UTF-8

    def chunks(self) -> Iterator[str]:
        if self.json_escaped:
            yield from self._json_chunks()
        else:
            decoder = codecs.getincrementaldecoder("utf-8")("strict")
            try:
                for k in range(self.start, self.end, CHUNK_BYTES):
                    yield decoder.decode(self.raw[k : min(k + CHUNK_BYTES, self.end)], final=False)
                yield decoder.decode(b"", final=True)
            except UnicodeDecodeError as exc:
                raise BadText("invalid_utf8", f"{exc.reason} near byte {exc.start}") from None

    def _json_chunks(self) -> Iterator[str]:
        raw, pos = self.raw, self.start
        while pos < self.end:
            cut = self.end
            if self.end - pos > CHUNK_BYTES:
                after = _cut_after(raw, pos + CHUNK_BYTES // 2, min(self.end, pos + 2 * CHUNK_BYTES))
                if after is None:
                    raise BadText("oversized", "no place to cut the JSON string for decoding")
                cut = after + 1
            try:
                yield orjson.loads(b'"' + raw[pos:cut] + b'"')
            except orjson.JSONDecodeError as exc:
                msg = str(exc)
                reason = "invalid_utf8" if ("UTF-8" in msg or "surrogate" in msg) else "malformed_json"
                raise BadText(reason, msg.split(": line 1")[0]) from None
            pos = cut


def _cut_after(raw: bytes, lo: int, hi: int) -> int | None:
    """A byte in raw[lo:hi] after which a JSON string may be cut: the last space, else the first other
    place from the middle of the range on, else the last one before it."""
    space = raw.rfind(b" ", lo, hi)
    if space >= 0:
        return space
    mid = (lo + hi) // 2
    found = _JSON_CUT.search(raw, mid, hi)
    if found is not None:
        return found.start()
    last = None
    for m in _JSON_CUT.finditer(raw, lo, mid):
        last = m.start()
    return last


def string_end(raw: bytes, pos: int) -> int:
    """Index of the closing quote of the JSON string opening at raw[pos] (O(1) memory, unlike a regex)."""
    i = pos + 1
    while True:
        j = raw.find(b'"', i)
        if j < 0:
            raise ValueError("unterminated string")
        k = j - 1
        while k > pos and raw[k] == 0x5C:  # backslashes right before the quote
            k -= 1
        if (j - 1 - k) % 2 == 0:
            return j
        i = j + 1


def locate_text(raw: bytes, key: str) -> tuple[int, int] | None:
    """The raw content span of the top-level string value of `key` in a JSON object line (last wins)."""
    try:
        pos = _ws(raw, 0)
        if raw[pos : pos + 1] != b"{":
            return None
        pos += 1
        span = None
        while True:
            pos = _ws(raw, pos)
            if raw[pos : pos + 1] == b"}":
                return span
            if raw[pos : pos + 1] != b'"':
                return None
            name_end = string_end(raw, pos)
            name = orjson.loads(raw[pos : name_end + 1])
            pos = _ws(raw, name_end + 1)
            if raw[pos : pos + 1] != b":":
                return None
            pos = _ws(raw, pos + 1)
            if name == key and raw[pos : pos + 1] == b'"':
                end = string_end(raw, pos)
                span, pos = (pos + 1, end), end + 1
            else:
                pos = _skip_value(raw, pos)
            pos = _ws(raw, pos)
            if raw[pos : pos + 1] == b",":
                pos += 1
            elif raw[pos : pos + 1] != b"}":
                return None
    except (ValueError, IndexError, orjson.JSONDecodeError):
        return None


def _ws(raw: bytes, pos: int) -> int:
    return _WS.match(raw, pos).end()  # type: ignore[union-attr]


def _skip_value(raw: bytes, pos: int) -> int:
    head = raw[pos : pos + 1]
    if head == b'"':
        return string_end(raw, pos) + 1
    if head in (b"{", b"["):
        depth = 0
        while True:
            m = _STRUCT.search(raw, pos)
            if m is None:
                raise ValueError("unterminated value")
            c = raw[m.start() : m.start() + 1]
            if c == b'"':
                pos = string_end(raw, m.start()) + 1
                continue
            depth += 1 if c in (b"{", b"[") else -1
            pos = m.end()
            if depth == 0:
                return pos
    return _LITERAL.match(raw, pos).end()  # type: ignore[union-attr]


def blank_text(raw: bytes, span: tuple[int, int]) -> bytes:
    """The line with the giant string emptied: small enough to parse for the other fields."""
    return raw[: span[0]] + raw[span[1] :]


def pieces(chunks: Iterator[str], rule: str | None, piece: int | None = None) -> Iterator[str]:
    """Re-cut a stream of text chunks into pieces of ~`piece` characters where `rule` (cuts.CUT_RULES)
    allows; rule None: the chunks as they are (the document is never cut: its caller joins them)."""
    if rule is None:
        yield from chunks
        return
    piece = cuts.PIECE_CHARS if piece is None else piece  # read per call: tests lower them
    window = cuts.WHOLE_MAX_CHARS  # the longest piece (a stretch without a cut is encoded whole)
    safe = cuts.CUT_RULES[rule]
    buf, done = "", 0
    for chunk in chunks:
        buf += chunk
        while len(buf) > piece:
            match = safe.search(buf, piece, window)
            if match is None:
                if len(buf) < window:
                    break  # wait for more text
                at = f"between characters {done + piece} and {done + window}"
                raise cuts.refusal(f"no place the {rule} cut rule allows {at}", window)
            done += match.start()
            yield buf[: match.start()]
            buf = buf[match.start() :]
    if buf:
        yield buf


@dataclass(frozen=True)
class GiantInfo:
    chars: int
    digest: int | None  # xxh3-128 of the stripped text; None when it is empty
    # why it cannot be cut by its rule into pieces of at most cuts.WHOLE_MAX_CHARS; refused only
    # after the length filter, so that --max-chars (a way out the reason names) leaves it out
    uncuttable: str | None = None


def measure(text: GiantText, rule: str | None) -> GiantInfo:
    """First pass: length, stripped-text hash, proof that it decodes (else BadText) and can be cut by
    `rule` (else `uncuttable` says why; rule None: never cut, see Encoder.check_whole)."""
    digest = xxhash.xxh3_128()
    chars, started, any_text = 0, False, False
    pending = ""  # whitespace that is trailing so far: hashed only if more text follows

    def counted(stream: Iterator[str]) -> Iterator[str]:
        nonlocal chars, started, any_text, pending
        for chunk in stream:
            chars += len(chunk)
            part = chunk if started else chunk.lstrip(cuts.WHITE_SPACE)
            if part:
                started = True
                body = part.rstrip(cuts.WHITE_SPACE)
                if body:
                    digest.update((pending + body).encode("utf-8", "surrogatepass"))
                    pending = part[len(body) :]
                    any_text = True
                else:
                    pending += part
            yield chunk

    stream = counted(text.chunks())
    uncuttable = None
    try:
        for _ in pieces(stream, rule):
            pass
    except cuts.Unsplittable as exc:
        uncuttable = str(exc)
        for _ in stream:  # the rest is still measured and decoded
            pass
    digest_or_none = int(digest.intdigest()) if any_text else None
    return GiantInfo(chars=chars, digest=digest_or_none, uncuttable=uncuttable)
