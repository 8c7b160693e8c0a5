"""The ground truth is `tokenizers` on the whole document (`encode` + EOS), not one engine against the
other: shards of every pre-tokenizer family are compared with it, giant documents included (the giant
threshold and the piece size are lowered so that small documents take every path), and each cut rule
is checked at every place it allows in adversarial text."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from storekit.pipeline import cuts, giant
from tests.conftest import run_cli
from tests.unit.pipeline import tokfiles
from tests.unit.pipeline.helpers import dataset_documents, sample_records, write_jsonl

DS = Path("storage/datasets/text/t/v1")
# pieces a giant document is cut into by yesterday's code: documents must be longer to be cut there
OLD_PIECE = 128 * 1024
WORDS = [
    "word", "x", "'s", "'S", "42", "1234567", "ünï", "\u00a0", "\u3000", "  ", "\t", "\n", "\r\n", "\n\n",
    ".\n", ",\r\n", "/\n", "x.", "<|endoftext|>", "<|sep|>", "<|x|>", "e\u0301", "ﬁ", "ﬁx", "Ω", "Ω",
    "¨", "...", "'", '"', "\u2028", "😀", "１２", "Привет", "中文", "ABCdef", "\x1c", "\u0378",
]  # fmt: skip


def _noise(seed: int, n: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(WORDS) + rng.choice(["", " ", "\n", "  ", "\t", "."]) for _ in range(n))


def _sweep(families: Any, fast: set[str]) -> list[Any]:
    """The family sweep for CI; scripts/test.sh --fast keeps `fast` (one family per cut rule and
    kind of tokenizer), the others are marked slow."""
    return [pytest.param(f, marks=() if f in fast else pytest.mark.slow) for f in families]


def _tokenizer(family: str) -> Tokenizer:
    return Tokenizer.from_str(json.dumps(tokfiles.family_doc(family)))


# -- the cut rules, at every place they allow ---------------------------------------------------
# --fast: gpt2 and split at every cut they allow; families without a rule cost nothing
@pytest.mark.parametrize(
    "family",
    _sweep([*tokfiles.FAMILIES, "qwen2"], {"bytelevel", "llama3", "metaspace", "prepend", "added"}),
)
def test_every_cut_the_rule_allows_gives_the_ids_of_the_whole_text(family: str) -> None:
    from storekit.pipeline.tokenizer import cut_rule

    doc = tokfiles.family_doc(family)
    rule = cut_rule(doc)
    expected = {
        "bytelevel": "gpt2",
        "added_cuttable": "gpt2",
        "llama3": "split",
        "qwen2": "split",
        "o200k": "split",
        "tekken": "split",
        "metaspace": None,  # a ▁ is prepended to each piece: never cut
        "prepend": None,
        "added": None,  # lstrip/rstrip tokens swallow whitespace across a cut
    }[family]
    assert rule == expected
    if rule is None:
        return
    tok = _tokenizer(family)
    for seed in range(3):
        text = _noise(seed, 700) + "a.\n\nb  c\t\n d"
        cut_at = [m.start() for m in cuts.CUT_RULES[rule].finditer(text) if 0 < m.start() < len(text)]
        assert len(cut_at) > 100
        whole = tok.encode(text, add_special_tokens=False).ids
        lefts = tok.encode_batch([text[:i] for i in cut_at], add_special_tokens=False)
        rights = tok.encode_batch([text[i:] for i in cut_at], add_special_tokens=False)
        for i, left, right in zip(cut_at, lefts, rights, strict=True):
            assert left.ids + right.ids == whole, (family, i, text[i - 5 : i + 5])


@pytest.mark.parametrize("family", ["llama3", "o200k", "tekken"])
def test_the_byte_level_rule_is_wrong_for_split_tokenizers(family: str) -> None:
    """Why Split tokenizers need their own rule: punctuation joins the newlines after it."""
    tok = _tokenizer(family)
    text = "x.\nx.\n"
    assert cuts.CUT_RULES["gpt2"].search(text).start() == 2  # type: ignore[union-attr]
    assert cuts.CUT_RULES["split"].search(text).start() == 3  # type: ignore[union-attr]
    whole = tok.encode(text, add_special_tokens=False).ids
    assert [*tok.encode("x.").ids, *tok.encode("\nx.\n").ids] != whole
    assert [*tok.encode("x.\n").ids, *tok.encode("x.\n").ids] == whole


# -- shards against the whole-document encoding ---------------------------------------------------
@pytest.fixture
def small_giants(monkeypatch: pytest.MonkeyPatch) -> None:
    """Giant from 32 KiB, decoded in 8 KiB chunks, cut into ~4K-character pieces."""
    monkeypatch.setattr(giant, "GIANT_BYTES", 32 << 10)
    monkeypatch.setattr(giant, "CHUNK_BYTES", 8 << 10)
    monkeypatch.setattr(cuts, "PIECE_CHARS", 4 << 10)


def _documents(family: str) -> list[str]:
    real = "".join(r["text"] for r in sample_records(limit_bytes=40_000, max_doc=8_000))
    n = OLD_PIECE + 8_000  # long enough for yesterday's giant path to cut it
    docs = [
        ("x.\n" * n)[:n],  # Llama-3 Split: `.\n` is one pre-token
        (real * 4)[:n],  # prose and code: Metaspace adds a ▁ at every cut
        _noise(7, n // 3)[:n],
        "short one",
        real[:3000],
        ("x.\n" * 4000)[:10_000],  # long but not giant: cut by encode_long, not giant.pieces
        real[:12_000],
    ]
    if family == "added":
        docs.append(("<|sep|>   " * n)[:n])  # an rstrip token swallows the spaces after it
    return docs


def _eos(family: str) -> str:
    return tokfiles.family_eos(family)


def _prepare(tmp_path: Path, capsys: Any, tok_file: Path, eos: str, *args: str) -> Any:
    return run_cli(
        [
            "prepare",
            "dataset",
            "-i",
            "in.jsonl",
            "--tokenizer",
            str(tok_file),
            "--eos-token",
            eos,
            "--name",
            "t",
            "--json",
            "--quiet",
            "--workers",
            "1",
            "--no-dedup",
            *args,
        ],
        capsys,
    )


# --fast: a gpt2-cut, a split-cut and a never-cut family
@pytest.mark.parametrize("family", _sweep(tokfiles.FAMILIES, {"bytelevel", "llama3", "metaspace", "prepend"}))
def test_shards_are_the_whole_document_encoding(
    family: str, small_giants: None, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    tok_file = tokfiles.write(tokfiles.family_doc(family), tmp_path / "tokenizer.json")
    texts = _documents(family)
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    res = _prepare(tmp_path, capsys, tok_file, _eos(family))
    assert res.code == 0, res.stderr
    tok = Tokenizer.from_str(tok_file.read_text())
    eos = tok.token_to_id(_eos(family))
    expected = [[*tok.encode(t, add_special_tokens=False).ids, eos] for t in texts]
    got = dataset_documents(tmp_path / DS)
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        first = next((i for i, (a, b) in enumerate(zip(g, e, strict=False)) if a != b), min(len(g), len(e)))
        assert g == e, (
            f"{family}: document {k}: {len(g)} tokens, whole text {len(e)}; first difference {first}"
        )


def test_a_document_no_rule_may_cut_is_refused_past_the_whole_bound(
    small_giants: None, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """Metaspace: longer than the bound for encoding whole, the document is refused in one line
    naming it and a way out; nothing is written for it (with --on-error skip it is counted)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cuts, "WHOLE_MAX_CHARS", 100_000)
    tok_file = tokfiles.write(tokfiles.family_doc("metaspace"), tmp_path / "tokenizer.json")
    long = ("a b. " * 40_000)[: OLD_PIECE + 8_000]
    write_jsonl(tmp_path / "in.jsonl", [{"text": "kept"}, {"text": long}, {"text": "also kept"}])
    res = _prepare(tmp_path, capsys, tok_file, "</s>", "--on-error", "fail")
    assert res.code == 1, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and f"{tmp_path / 'in.jsonl'}:2" in lines[0], res.stderr
    assert "--max-chars 100000" in lines[0] and "no proven place to cut" in lines[0]
    assert not (tmp_path / DS).exists()
    res = _prepare(tmp_path, capsys, tok_file, "</s>", "--on-error", "skip")
    assert res.code == 0, res.stderr
    stats = res.json()["manifest"]["stats"]
    assert stats["errors"] == {"oversized": 1} and stats["docs_kept"] == 2
    # the way out it names: the length filter leaves it out before it is refused
    res = _prepare(tmp_path, capsys, tok_file, "</s>", "--on-error", "fail", "--max-chars", "100000",
                   "--version", "v2")  # fmt: skip
    assert res.code == 0, res.stderr
    stats = res.json()["manifest"]["stats"]
    assert stats["errors"] == {} and stats["filtered"]["too_long"] == 1 and stats["docs_kept"] == 2
    tok = Tokenizer.from_str(tok_file.read_text())
    eos = tok.token_to_id("</s>")
    assert dataset_documents(tmp_path / DS) == [
        [*tok.encode(t, add_special_tokens=False).ids, eos] for t in ("kept", "also kept")
    ]


def _without_cuts(seed: int, n: int) -> str:
    """n characters of CJK-like text: no place the gpt2 or split rule allows (no ASCII printable
    character before ASCII whitespace, no newline before an ASCII letter or digit)."""
    rng = random.Random(seed)
    words = ["中文", "文本", "处理", "，", "。", "。\n", "\n", "　　", "第一章", "テキスト", "한국어", "！",
             "１２", "😀", "ﬁ", "Ω", "\u2028"]  # fmt: skip
    text = "".join(rng.choice(words) for _ in range(n))[:n]
    assert len(text) == n and not any(rule.search(text) for rule in cuts.CUT_RULES.values())
    return text


@pytest.mark.parametrize("family", ["bytelevel", "llama3"])
def test_a_stretch_no_rule_may_cut_is_encoded_whole_within_the_bound(
    family: str, small_giants: None, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """Text without a place its cut rule allows (CJK prose) is one piece encoded whole, up to
    cuts.WHOLE_MAX_CHARS, as a tokenizer without a rule gets it; it was refused once the rule found
    no cut within 16 pieces (a long document: none up to its end), and a giant JSON string of it
    with no place to cut for decoding. Past the bound it is refused in one line naming the document
    and the way out, after the length filter (--max-chars, which it names, leaves it out)."""
    monkeypatch.chdir(tmp_path)
    tok_file = tokfiles.write(tokfiles.family_doc(family), tmp_path / "tokenizer.json")
    real = "".join(r["text"] for r in sample_records(limit_bytes=40_000, max_doc=8_000))
    long = _without_cuts(1, 9_000)  # the long path (over 2 pieces, under the giant threshold)
    assert len(long) > 2 * cuts.PIECE_CHARS and len(long.encode()) + 20 < giant.GIANT_BYTES
    texts = [
        long,
        _without_cuts(2, 100_000),  # giant: longer than 16 pieces without a cut
        "short",
        real[:20_000] + _without_cuts(3, 80_000) + real[:20_000],  # giant: cut, one long piece, cut
    ]
    # the second as json.dumps writes it by default (only escapes: \uXXXX, surrogate pairs), the others
    # as UTF-8: a JSON string without ASCII is still decoded in chunks
    lines = [json.dumps({"text": t}, ensure_ascii=k == 1).encode() for k, t in enumerate(texts)]
    write_jsonl(tmp_path / "in.jsonl", lines)
    eos_name = _eos(family)
    res = _prepare(tmp_path, capsys, tok_file, eos_name, "--on-error", "fail")
    assert res.code == 0, res.stderr
    assert res.json()["manifest"]["tokenizer"]["cut_rule"] == ("gpt2" if family == "bytelevel" else "split")
    tok = Tokenizer.from_str(tok_file.read_text())
    eos = tok.token_to_id(eos_name)
    assert dataset_documents(tmp_path / DS) == [
        [*tok.encode(t, add_special_tokens=False).ids, eos] for t in texts
    ]
    # past the bound: refused, naming the first such document and the way out, nothing published
    monkeypatch.setattr(cuts, "WHOLE_MAX_CHARS", 50_000)
    res = _prepare(tmp_path, capsys, tok_file, eos_name, "--on-error", "fail", "--version", "v2")
    assert res.code == 1, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and f"{tmp_path / 'in.jsonl'}:2" in lines[0], res.stderr
    assert "--max-chars 50000" in lines[0] and "cut rule allows" in lines[0]
    assert not (tmp_path / DS.parent / "v2").exists()
    res = _prepare(tmp_path, capsys, tok_file, eos_name, "--on-error", "fail", "--version", "v2",
                   "--max-chars", "50000")  # fmt: skip
    assert res.code == 0, res.stderr
    assert res.json()["manifest"]["stats"]["filtered"]["too_long"] == 2
    assert dataset_documents(tmp_path / DS.parent / "v2") == [
        [*tok.encode(t, add_special_tokens=False).ids, eos] for t in (long, "short")
    ]


def test_a_document_of_control_characters_is_kept(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    """U+001C..U+001F are whitespace to Python's str.strip(), not to `tokenizers` (not White_Space):
    such a document is text, encoded like any other; one of White_Space only is still empty."""
    monkeypatch.chdir(tmp_path)
    tok_file = tokfiles.write(tokfiles.family_doc("llama3"), tmp_path / "tokenizer.json")
    texts = ["\x1c\x1d\x1e\x1f", " \x1f ", "\x1c", "plain"]
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in [*texts, " \u3000\t\n\x85 "]])
    res = _prepare(tmp_path, capsys, tok_file, "<|endoftext|>")
    assert res.code == 0, res.stderr
    assert res.json()["manifest"]["stats"]["errors"] == {"empty": 1}
    tok = Tokenizer.from_str(tok_file.read_text())
    eos = tok.token_to_id("<|endoftext|>")
    expected = [[*tok.encode(t, add_special_tokens=False).ids, eos] for t in texts]
    assert all(len(e) > 1 for e in expected)  # the tokenizer does encode them
    assert dataset_documents(tmp_path / DS) == expected


@pytest.mark.parametrize("engine", ["hf", "auto"])
def test_a_document_the_tokenizer_encodes_to_nothing_is_empty(
    engine: str, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """BERT's normalizer removes control and format characters: a document of nothing else is no
    document (counted as empty, as one of whitespace only), not a bare EOS; inside text they stay."""
    monkeypatch.chdir(tmp_path)
    doc = tokfiles.trained("wordpiece", [r["text"] for r in sample_records(limit_bytes=20_000)])
    tok_file = tokfiles.write(doc, tmp_path / "tokenizer.json")
    texts = ["\x1c\x1d\x1e\x1f", "plain text", " \u200b\ufeff ", "a\x1cb", "\x1c"]
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    res = _prepare(tmp_path, capsys, tok_file, "[SEP]", "--tokenizer-engine", engine)
    assert res.code == 0, res.stderr
    assert res.json()["manifest"]["stats"]["errors"] == {"empty": 3}
    tok = Tokenizer.from_str(tok_file.read_text())
    eos = tok.token_to_id("[SEP]")
    kept = ["plain text", "a\x1cb"]
    assert dataset_documents(tmp_path / DS) == [
        [*tok.encode(t, add_special_tokens=False).ids, eos] for t in kept
    ]


@pytest.mark.slow
def test_a_real_giant_document_is_the_whole_document_encoding(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """A document over the real 4 MiB threshold, with the real piece size, for a Llama-3 Split
    tokenizer: `x.\\n` repeated gave 3,000,035 tokens instead of 3,000,001 in the issue."""
    monkeypatch.chdir(tmp_path)
    assert giant.GIANT_BYTES == 4 << 20
    tok_file = tokfiles.write(tokfiles.family_doc("llama3"), tmp_path / "tokenizer.json")
    text = "x.\n" * 1_500_000 + "the end. " * 1000
    write_jsonl(tmp_path / "in.jsonl", [{"text": text}])
    res = _prepare(tmp_path, capsys, tok_file, "<|endoftext|>")
    assert res.code == 0, res.stderr
    tok = Tokenizer.from_str(tok_file.read_text())
    (got,) = dataset_documents(tmp_path / DS)
    assert got == [*tok.encode(text, add_special_tokens=False).ids, tok.token_to_id("<|endoftext|>")]
