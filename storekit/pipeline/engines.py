"""Which tokenizer engine encodes a plan: `tokenizers` (hf) or the compiled fast BPE (tiktoken).

`auto` uses the fast engine only when the tokenizer compiles (`fastbpe.compile_fast`) *and* a sample
of the actual input encodes to the same ids with both engines; anything else falls back to `hf`, and
the reason goes to the plan, the manifest and `--json`. `tiktoken` (forced) fails instead (exit 2).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from storekit.errors import MismatchError, UsageError
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.plan import Piece, PrepPlan
from storekit.pipeline.tokenizer import TokenizerInfo, load_tokenizer, read_planned

ENGINES = ("auto", "hf", "tiktoken")
# Input sampled at plan time: 1/256 of it, at least 512 KiB, at most 2 MiB. The `tokenizers` side
# costs ~5x the fast engine per byte, so the check stays ~2% of the fast engine's work on the input
# (it runs before any task: on 1 core it is serial time, on more it is spread over them).
SAMPLE_MIN_BYTES = 512 << 10
SAMPLE_MAX_BYTES = 2 << 20
SAMPLE_SHARE = 256
SAMPLE_PIECES = 16
# The fast engine is chosen on evidence only: the check must have compared the whole input, or at least
# this many texts and bytes (slices of long and giant documents count: they are what their tasks encode)
SAMPLE_FLOOR_TEXTS = 16
SAMPLE_FLOOR_BYTES = 128 << 10
SAMPLE_SLICE_CHARS = 8 << 10  # long documents are sampled in slices of this many characters

_COMPILED: dict[str, Any] = {}  # xxh3 of tokenizer.json -> Compiled or the NotCompilable reason (str)


def compiled_for(info: TokenizerInfo) -> Any:
    """The tokenizer's compiled form, or a str saying why it has none (cached per process)."""
    if info.xxh3_128 not in _COMPILED:
        from storekit.pipeline.fastbpe import NotCompilable
        from storekit.pipeline.fastbpe_cache import compile_cached

        try:
            import tiktoken  # noqa: F401
        except ImportError:
            _COMPILED[info.xxh3_128] = "the tiktoken package is not installed"
            return _COMPILED[info.xxh3_128]
        try:
            _COMPILED[info.xxh3_128] = compile_cached(
                info.xxh3_128, lambda: _doc(info), lambda: load_tokenizer(info)
            )
        except NotCompilable as exc:
            _COMPILED[info.xxh3_128] = str(exc)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # an unexpected layout
            _COMPILED[info.xxh3_128] = f"unexpected tokenizer.json structure ({type(exc).__name__}: {exc})"
    return _COMPILED[info.xxh3_128]


def _doc(info: TokenizerInfo) -> dict[str, Any]:
    """The parsed tokenizer.json, provably the bytes `info` was made from (the cache key is their xxh3)."""
    import json

    from storekit.pipeline.fastbpe import NotCompilable

    try:
        text = read_planned(info)
    except MismatchError:
        raise NotCompilable(f"{info.file} changed while storekit was reading it") from None
    doc: dict[str, Any] = json.loads(text)
    return doc


def fast_encoder(info: TokenizerInfo, *, special_as_text: bool) -> Any:
    from storekit.pipeline.fastbpe import FastBPE

    compiled = compiled_for(info)
    if isinstance(compiled, str):
        raise UsageError(f"tokenizer {info.name}: the fast engine cannot encode it: {compiled}")
    # `tokenizers` is loaded only if a document needs it (FastBPE.load_hf)
    return FastBPE(
        compiled,
        lambda: load_tokenizer(info, special_as_text=special_as_text),
        special_as_text=special_as_text,
    )


Sample = Iterable[tuple[str, Callable[[], str]]]  # (text, where it is) of documents from the input


def choose_engine(
    requested: str, info: TokenizerInfo, sample: Sample, *, special_as_text: bool
) -> TokenizerInfo:
    """`info` with engine, engine_reason and sample_check filled in; raises UsageError for a forced
    fast engine that cannot be used."""
    if requested == "hf":
        return _with(info, "hf", "asked for (--tokenizer-engine hf)", None)
    compiled = compiled_for(info)
    if isinstance(compiled, str):
        return _refuse(requested, info, f"the tokenizer cannot be compiled exactly: {compiled}", None)
    check = sample_check(info, sample, special_as_text=special_as_text)
    check["whole_input"] = bool(getattr(sample, "whole_input", False))
    if check["first_difference"] is None and requested == "auto" and not _enough(check):
        return _with(
            info,
            "hf",
            f"fallback: the sample check compared too little input to choose the fast engine "
            f"({check['documents']} texts, {check['bytes']} bytes; it needs the whole input or "
            f"{SAMPLE_FLOOR_TEXTS} texts and {SAMPLE_FLOOR_BYTES} bytes)",
            check,
        )
    if check["first_difference"] is not None:
        diff = check["first_difference"]
        return _refuse(
            requested,
            info,
            f"the sample check found different ids in {diff['where']} (token {diff['at']})",
            check,
        )
    how = "asked for (--tokenizer-engine tiktoken)" if requested == "tiktoken" else "compiled exactly"
    return _with(
        info,
        "tiktoken",
        f"{how}: {compiled.pattern_name} pre-tokenizer, normalizer "
        f"{'+'.join(compiled.normalizers) or 'none'}; sample check: {check['documents']} documents identical",
        check,
    )


def _enough(check: dict[str, Any]) -> bool:
    if check["documents"] < 1:
        return False
    return bool(check["whole_input"]) or (
        check["documents"] >= SAMPLE_FLOOR_TEXTS and check["bytes"] >= SAMPLE_FLOOR_BYTES
    )


def _refuse(requested: str, info: TokenizerInfo, reason: str, check: dict[str, Any] | None) -> TokenizerInfo:
    if requested == "tiktoken":
        raise UsageError(
            f"--tokenizer-engine tiktoken: {reason}",
            hint="use --tokenizer-engine auto (falls back to tokenizers) or hf",
        )
    return _with(info, "hf", f"fallback: {reason}", check)


def _with(info: TokenizerInfo, engine: str, reason: str, check: dict[str, Any] | None) -> TokenizerInfo:
    from dataclasses import replace

    return replace(info, engine=engine, engine_reason=reason, sample_check=check)


def sample_check(info: TokenizerInfo, sample: Sample, *, special_as_text: bool) -> dict[str, Any]:
    """Encode the sample with both engines; the first document whose ids differ, if any."""
    from concurrent.futures import ThreadPoolExecutor

    fast = fast_encoder(info, special_as_text=special_as_text)
    hf = load_tokenizer(info, special_as_text=special_as_text)
    docs = nbytes = tokens = 0
    first: dict[str, Any] | None = None
    # both engines release the GIL while they encode: the fast side runs beside `tokenizers`' pool
    with ThreadPoolExecutor(1, thread_name_prefix="storekit-sample-check") as pool:
        for batch in _batches(sample, 256):
            texts, wheres = zip(*batch, strict=True)
            fast_ids = pool.submit(_encode_all, fast, texts)
            expected = hf.encode_batch_fast(list(texts), add_special_tokens=False)
            first = _compare(wheres, expected, fast_ids.result())
            docs += len(texts)
            nbytes += sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
            tokens += sum(len(enc.ids) for enc in expected)
            if first is not None:
                break
    return {
        "documents": docs,
        "bytes": nbytes,
        "tokens": tokens,
        "identical": first is None,
        "first_difference": first,
    }


def _encode_all(fast: Any, texts: Sequence[str]) -> list[list[int]]:
    return [fast.encode(t) for t in texts]


def _compare(
    wheres: Sequence[Callable[[], str]], expected: Sequence[Any], got: Sequence[list[int]]
) -> dict[str, Any] | None:
    """Where the first document whose ids differ is, and the first differing token's index."""
    for where, enc, ids in zip(wheres, expected, got, strict=True):
        if ids != enc.ids:
            at = next(
                (k for k, (a, b) in enumerate(zip(ids, enc.ids, strict=False)) if a != b),
                min(len(ids), len(enc.ids)),
            )
            return {"where": where(), "at": at}
    return None


def _batches(items: Sample, size: int) -> Iterator[list[tuple[str, Callable[[], str]]]]:
    it = iter(items)
    while batch := list(itertools.islice(it, size)):
        yield batch


def sample_budget(total_bytes: int) -> int:
    return min(SAMPLE_MAX_BYTES, max(SAMPLE_MIN_BYTES, total_bytes // SAMPLE_SHARE))


class InputSample:
    """Texts from the input for the sample check: documents from the start of the first sources and
    from pieces inside them, about `budget` bytes; a long document (over 2 x PIECE_CHARS, the ones
    tasks cut) gives slices of SAMPLE_SLICE_CHARS spread over it, a giant one slices from its start.
    `whole_input`, once iterated: nothing of the input was left out."""

    def __init__(self, plan: PrepPlan, fs: InputFS, budget: int | None = None) -> None:
        self.plan, self.fs = plan, fs
        self.budget = sample_budget(plan.total_bytes) if budget is None else budget
        self.whole_input = False

    def __iter__(self) -> Iterator[tuple[str, Callable[[], str]]]:
        from storekit.pipeline.readers import PieceReader

        plan = self.plan
        pieces = [p for t in plan.tasks for p in t.pieces]
        firsts: dict[int, Piece] = {}
        for p in pieces:
            firsts.setdefault(p.source, p)
        chosen = list(firsts.values())[: SAMPLE_PIECES // 2]
        inside = [p for p in pieces if p not in chosen]
        step = max(1, len(inside) // (SAMPLE_PIECES - len(chosen)))
        chosen += inside[step // 2 :: step][: SAMPLE_PIECES - len(chosen)]
        whole = len(chosen) == len(pieces)
        opts = plan.options
        left = self.budget  # a piece whose last document overshot leaves less to the next: total ~budget
        for n, piece in enumerate(chosen):
            share = max(1, left // (len(chosen) - n))  # at least one document from every chosen piece
            src = plan.sources[piece.source]
            reader = PieceReader(
                self.fs,
                src,
                piece,
                text_key=opts["text_key"],
                keep_fields=(),
                max_doc_bytes=opts["max_doc_bytes"],
            )
            taken = 0
            for doc in reader.docs():
                if doc.giant is not None or len(doc.text or "") > _long_chars():
                    whole = False  # only slices of it are compared
                for text, where in _texts_of(doc, reader, share - taken):
                    yield text, where
                    taken += len(text.encode("utf-8", "surrogatepass"))
                if taken >= share:
                    whole = False
                    break
            left -= taken
        self.whole_input = whole


def _texts_of(doc: Any, reader: Any, share: int) -> Iterator[tuple[str, Callable[[], str]]]:
    """What the sample takes of one document: itself, or slices of a long or giant one."""
    from storekit.pipeline.giant import BadText

    at = functools.partial(reader.where, doc.position)
    if doc.giant is not None:
        buf, start = "", 0
        try:
            for chunk in doc.giant.chunks():
                buf += chunk
                while len(buf) >= SAMPLE_SLICE_CHARS:
                    yield buf[:SAMPLE_SLICE_CHARS], _slice_where(at, start, SAMPLE_SLICE_CHARS)
                    buf, start = buf[SAMPLE_SLICE_CHARS:], start + SAMPLE_SLICE_CHARS
                    if start >= share:
                        return
        except BadText:
            return  # the task reports it
        if buf:
            yield buf, _slice_where(at, start, len(buf))
        return
    text = doc.text
    if not text:
        return
    if len(text) <= _long_chars():
        yield text, at
        return
    size = min(SAMPLE_SLICE_CHARS, len(text) // 2)
    count = max(2, min(len(text) // size, share // size))
    step = (len(text) - size) // (count - 1)
    for k in range(0, step * count, step):
        yield text[k : k + size], _slice_where(at, k, size)


def _long_chars() -> int:
    from storekit.pipeline import cuts

    return 2 * cuts.PIECE_CHARS


def _slice_where(at: Callable[[], str], start: int, n: int) -> Callable[[], str]:
    return lambda: f"{at()} (characters {start}-{start + n})"


def sample_documents(plan: PrepPlan, fs: InputFS, budget: int | None = None) -> InputSample:
    """The sample check's texts (see InputSample)."""
    return InputSample(plan, fs, budget)
