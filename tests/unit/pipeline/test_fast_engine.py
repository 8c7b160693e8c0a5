"""The compiled fast BPE engine gives `tokenizers`' ids exactly, or is refused with a reason.

Tokenizers: see tokfiles.py (bundled 65k, a NeoX-style variant, tekken / Llama-3 / Qwen-2-style files
built from Mistral's tekken ranks). Text: the Debian Administrator's Handbook in its ~28 languages
(Debian's debian-handbook package), CPython sources (the bundled sample), hand-made hard cases and a
sweep over every code point this Python's Unicode assigns, built to hit each regex class boundary.
"""

from __future__ import annotations

import gzip
import json
import re
import unicodedata
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from storekit.pipeline import engines
from storekit.pipeline.bundled import bundled_path
from storekit.pipeline.engines import choose_engine, compiled_for, fast_encoder
from storekit.pipeline.fastbpe import _SENTINEL, FastBPE
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.plan import plan_tasks
from storekit.pipeline.sources import discover_sources
from storekit.pipeline.spec import CLI_SOURCE, build_spec
from storekit.pipeline.tokenizer import load_tokenizer, resolve_tokenizer
from tests.unit.pipeline import tokfiles
from tests.unit.pipeline.helpers import TOKENIZER, write_jsonl

HANDBOOK = Path("/usr/share/doc/debian-handbook/html")  # Debian package debian-handbook (scripts/test.sh)

HARD_CASES = [
    "plain ASCII, digits 1234567890 and 3.14159e-10, 0x7fff_ffff",
    "def f(x):\n\treturn {'a': [1, 2, 3]}  # comment\r\n\r\n\n\n    \n",
    "     leading and trailing spaces     ",
    " " * 300 + "x" + "\n" * 200 + "\t" * 50 + "y" + " \n \n " * 40,
    "中文文本，日本語のテキスト、한국어 텍스트。ＦＵＬＬＷＩＤＴＨ ｶﾀｶﾅ",
    "العربية مع التشكيل: بِسْمِ اللَّهِ الرَّحْمَٰنِ and עִבְרִית עם ניקוד",
    "emoji 👩🏽‍💻👨‍👩‍👧‍👦🏳️‍🌈 flags 🇫🇷🇯🇵 keycap 1️⃣ #️⃣",
    "combining: e\u0301 a\u0308\u0304 \u1e9b\u0323 Việt Nam tiếng Việt ǅ ﬁ ﬀ ① ㍿ ™ ½ x²",
    "NKo: \u07ca\u07eb\u07f3\u07fd \u07d3\u07ed\u07f2 and Devanagari क़ ख़ ग़",
    "Hangul jamo \u1100\u1161\u11a8 and syllables 각 \uac00\u11a8",
    "controls \x00\x01\x07\x08\x0b\x0c\x1b[31m red \x1b[0m \x7f \x85 \u200b\u200c\u200d\u2028\u2029\ufeff",
    "contractions: it's I'LL we've THEY'RE she'd 'S 'ſ o'Kelvin K's",
    "literal specials <EOT> inside <EOT><EOT> text <SOS>x<META_START>y<META_END> <|endoftext|>",
    "added tokens: a <|pad|> b  <|sep|>   c <|tag|> d wordy word sword word_ ﬁx Ω Ω <|end|>",
    "[INST] hi [/INST] </s><s> <unk>",
    "newer Unicode: \U0001e4d0\U0001e4d1 \U00011f04 \U00010d4a\U00010d4b \U000105c0 \U0001e5d0"
    " \U0001fae8 \U0001fac8",
    "private use \ue000\U000f0000 noncharacters \ufdd0\uffff",
    "a" * 5000 + " " + "ب" * 3000 + " " + "1" * 999,
    f"the core's never-allowed sentinel is plain text: {_SENTINEL}x {_SENTINEL}{_SENTINEL[:5]}",
]


@cache
def handbook_texts() -> list[str]:
    """Three pages of every language of the handbook, tags stripped: real multilingual prose."""
    out = []
    for lang in sorted(p for p in HANDBOOK.iterdir() if p.is_dir()):
        for page in sorted(lang.glob("*.html"))[4:7]:
            html = page.read_text(encoding="utf-8", errors="strict")
            text = re.sub(r"<[^>]+>", "", html)
            out.append(text[:12000])
    assert len({p.parent.name for p in HANDBOOK.glob("*/*.html")}) >= 20
    return out


@cache
def code_texts() -> list[str]:
    lines = gzip.decompress(bundled_path("bundled:cpython-stdlib-sample.jsonl.gz").read_bytes()).splitlines()
    return [json.loads(line)["text"] for line in lines[:60]]


def sweep_texts(step: int = 1) -> list[str]:
    """Every assigned code point (every `step`-th) in contexts that stress the regex classes:
    letter/number/other/space neighbours, a leading space, contractions, newlines."""
    chars = [
        chr(cp) for cp in range(0x80, 0x110000, step) if unicodedata.category(chr(cp)) not in ("Cn", "Cs")
    ]
    docs, cur = [], []
    for k, c in enumerate(chars):
        cur.append(f"a{c}b {c}{c}1{c}. {c}'s\n{c} ")
        if k % 300 == 299:
            docs.append("".join(cur))
            cur = []
    docs.append("".join(cur))
    return docs


@cache
def tokenizer_doc(name: str) -> dict[str, Any]:
    if name == "bundled-65k":
        return tokfiles.bundled_doc()
    if name == "neox-style":
        return tokfiles.neox_style()
    pattern, norm = {
        "tekken": ("tekken", None),
        "llama3-style": ("llama3", None),
        "qwen2-style": ("qwen2", "NFC"),
    }[name]
    return tokfiles.tekken_style(pattern, norm)


def engines_for(name: str, tmp_path: Path, *, special_as_text: bool = False) -> tuple[Any, FastBPE]:
    path = tokfiles.write(tokenizer_doc(name), tmp_path / f"{name}.json")
    info = resolve_tokenizer(str(path), eos=False, bos=False)
    compiled = compiled_for(info)
    assert not isinstance(compiled, str), compiled
    return load_tokenizer(info, special_as_text=special_as_text), fast_encoder(
        info, special_as_text=special_as_text
    )


def assert_identical(hf: Any, fast: FastBPE, texts: list[str]) -> None:
    expected = hf.encode_batch_fast(texts, add_special_tokens=False)
    for k, (text, enc) in enumerate(zip(texts, expected, strict=True)):
        got = fast.encode(text)
        if got != enc.ids:
            at = next((i for i, (a, b) in enumerate(zip(got, enc.ids, strict=False)) if a != b), None)
            raise AssertionError(f"document {k} differs at token {at}: {text[:80]!r}")


TOKENIZERS = ["bundled-65k", "neox-style", "tekken", "llama3-style", "qwen2-style"]


@pytest.mark.parametrize(  # a sweep for CI; --fast keeps the bundled ByteLevel and a Split regex one
    "name",
    [
        pytest.param(n, marks=() if n in ("bundled-65k", "llama3-style") else pytest.mark.slow)
        for n in TOKENIZERS
    ],
)
def test_identical_ids_on_real_and_hard_text(name: str, tmp_path: Path) -> None:
    hf, fast = engines_for(name, tmp_path)
    texts = HARD_CASES + handbook_texts() + code_texts()
    assert_identical(hf, fast, texts)
    # the fallback to `tokenizers` inside the fast engine is for rare characters, not for real prose
    assert fast.hf_documents <= 2


@pytest.mark.parametrize(
    ("name", "step"),
    [  # every code point through the big vocabularies is a sweep for CI; --fast keeps a strided one
        pytest.param("bundled-65k", 1, marks=pytest.mark.slow),
        pytest.param("tekken", 1, marks=pytest.mark.slow),
        ("llama3-style", 13),
    ],
)
def test_identical_ids_on_every_assigned_code_point(name: str, step: int, tmp_path: Path) -> None:
    hf, fast = engines_for(name, tmp_path)
    assert_identical(hf, fast, sweep_texts(step))


@pytest.mark.parametrize("name", ["bundled-65k", "neox-style", "tekken"])
def test_special_tokens_as_text_identical_too(name: str, tmp_path: Path) -> None:
    hf, fast = engines_for(name, tmp_path, special_as_text=True)
    assert hf.encode_special_tokens
    assert_identical(hf, fast, HARD_CASES)
    default_hf, _ = engines_for(name, tmp_path)
    text = "stop <EOT> here [INST] <|end|>"
    assert fast.encode(text) != default_hf.encode(text, add_special_tokens=False).ids


def _tiny_inconsistent_bpe() -> dict[str, Any]:
    """A BPE whose merges tiktoken's rank-by-concatenation cannot follow: (h,e) (t,h) (th,e).
    `tokenizers` encodes "then" as t|he|n (no merge joins t and he); tiktoken would join them."""
    doc = tokfiles.bundled_doc()
    symbols = {c: i for i, c in enumerate(sorted(tokfiles.bytes_to_unicode().values()))}
    n = len(symbols)
    symbols.update({"he": n, "th": n + 1, "the": n + 2})
    doc["model"].update(vocab=symbols, merges=["h e", "t h", "th e"], ignore_merges=True)
    doc["normalizer"] = None
    doc["added_tokens"] = []
    return doc


def test_sample_check_catches_a_tokenizer_that_compiles_but_differs(tmp_path: Path) -> None:
    path = tokfiles.write(_tiny_inconsistent_bpe(), tmp_path / "tiny.json")
    info = resolve_tokenizer(str(path), eos=False, bos=False)
    assert not isinstance(compiled_for(info), str)  # nothing in its structure is refused ...
    sample = [("hello", lambda: "in.jsonl:1"), ("and then", lambda: "in.jsonl:2")]
    chosen = choose_engine("auto", info, sample, special_as_text=False)
    assert chosen.engine == "hf"  # ... but the sample shows the difference, and names the document
    assert "in.jsonl:2" in chosen.engine_reason
    assert (
        chosen.sample_check is not None and chosen.sample_check["first_difference"]["where"] == "in.jsonl:2"
    )
    with pytest.raises(Exception, match=r"--tokenizer-engine tiktoken: .*in\.jsonl:2"):
        choose_engine("tiktoken", info, sample, special_as_text=False)


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("dropout", "BPE dropout 0.1"),
        ("wordpiece", "normalizer BertNormalizer"),
        ("unigram", "pre-tokenizer Metaspace"),
    ],
)
def test_what_cannot_be_compiled_falls_back_with_the_reason(kind: str, reason: str, tmp_path: Path) -> None:
    doc = tokfiles.with_dropout() if kind == "dropout" else tokfiles.trained(kind, handbook_texts()[:40])
    path = tokfiles.write(doc, tmp_path / f"{kind}.json")
    info = resolve_tokenizer(str(path), eos=False, bos=False)
    why = compiled_for(info)
    assert isinstance(why, str) and reason in why
    chosen = choose_engine("auto", info, [], special_as_text=False)
    assert chosen.engine == "hf" and reason in chosen.engine_reason
    assert choose_engine("hf", info, [], special_as_text=False).engine == "hf"


def test_model_types_are_named(tmp_path: Path) -> None:
    doc = tokfiles.trained("unigram", handbook_texts()[:40])
    doc["pre_tokenizer"] = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": True,
    }
    doc["normalizer"] = None
    info = resolve_tokenizer(str(tokfiles.write(doc, tmp_path / "u.json")), eos=False, bos=False)
    assert "model Unigram" in compiled_for(info)
    engines._COMPILED.clear()


def test_tokenizer_pattern_is_what_the_tekken_file_says() -> None:
    data = json.loads(tokfiles.tekken_file().read_text())
    assert data["config"]["pattern"] == tokfiles.SPLIT_PATTERNS["tekken"]
    assert Tokenizer.from_str(json.dumps(tokenizer_doc("tekken"))).get_vocab_size() > tokfiles.TEKKEN_TOKENS


def test_sample_is_a_share_of_the_input_within_bounds() -> None:
    assert engines.sample_budget(0) == engines.sample_budget(120_000_000) == 512 << 10
    assert engines.sample_budget(256 << 20) == 1 << 20  # 1/256 of the input between the bounds
    assert engines.sample_budget(10 << 30) == 2 << 20


def test_the_sample_stays_near_its_budget_and_draws_from_every_source(tmp_path: Path) -> None:
    # documents of 1 KiB and 24 KiB in turn: a piece's last document overshoots its share by up to
    # 24 KiB; what it overshot comes off the next pieces' shares, so the total stays ~ the budget
    # (each of the 16 pieces overshooting on its own gave ~ +190 KiB here)
    big, small = "x" * (24 << 10), "y" * (1 << 10)
    for name in "abc":
        write_jsonl(
            tmp_path / "in" / f"{name}.jsonl", [{"text": big if i % 2 else small} for i in range(120)]
        )
    options = {
        "name": "x",
        "inputs": (str(tmp_path / "in"),),
        "tokenizer": TOKENIZER,
        "task_bytes": 256 << 10,
    }
    spec = build_spec(CLI_SOURCE, options, {})
    fs = InputFS(None)
    sources = discover_sources(spec.inputs, forced_format="auto", text_key="text", fs=fs)
    plan = plan_tasks(spec, sources, resolve_tokenizer(TOKENIZER, eos=True, bos=False))
    budget = 640 << 10
    docs = list(engines.sample_documents(plan, fs, budget))
    sampled = sum(len(text) for text, _ in docs)  # ASCII: characters are bytes; JSON adds ~12 per line
    assert budget - (2 << 10) <= sampled <= budget + (24 << 10)
    assert {where().rsplit(":", 1)[0] for _, where in docs} >= {
        str(tmp_path / "in" / f"{n}.jsonl") for n in "abc"
    }


def test_each_thread_and_each_forked_child_encodes_with_its_own_core(tmp_path: Path) -> None:
    """tiktoken's regexes run lock-free only for the first thread that used them, so the encoder
    gives every thread its own core (none shared with the sample check's thread, none inherited by
    a forked worker), and the ids stay the same in all of them."""
    import os
    import threading

    from storekit.pipeline import fastbpe

    hf, fast = engines_for("bundled-65k", tmp_path)
    texts = HARD_CASES[:20] + code_texts()[:5]
    seen: dict[str, list[Any]] = {}

    def encode_in_thread(name: str) -> None:
        assert_identical(hf, fast, texts)
        seen[name] = [fastbpe._core_for(fast.compiled), fastbpe._core_for(fast.compiled)]

    for name in ("a", "b"):
        worker = threading.Thread(target=encode_in_thread, args=(name,))
        worker.start()
        worker.join()
    encode_in_thread("main")
    cores = {name: pair[0] for name, pair in seen.items()}
    assert all(pair[0] is pair[1] for pair in seen.values())  # one per thread, kept
    assert len({id(core) for core in cores.values()}) == 3  # threads do not share one
    plain = "def area(r):\n    return 3.14159 * r ** 2  # ASCII: no document the fast engine hands over"
    expected = hf.encode(plain, add_special_tokens=False).ids  # the child touches no `tokenizers` pool
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: what it inherited is dropped, its core is new and encodes the same
        ok = fastbpe._core_for(fast.compiled) is not cores["main"] and fast.encode(plain) == expected
        os.write(write, b"ok" if ok else b"no")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 2)
    os.waitpid(pid, 0)
    assert answer == b"ok"
    assert fastbpe._core_for(fast.compiled) is cores["main"]  # the parent's is untouched
