"""A process that finds the compiled tokenizer in the cache encodes without ever making a
`tokenizers.Tokenizer` (what each Slurm element saves), with the same ids and special-string counts as
one that has it; the first document the fast engine is unsure of loads it, once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tokenizers

from storekit.errors import MismatchError
from storekit.pipeline import engines, fastbpe, fastbpe_cache
from storekit.pipeline import tokenizer as tokenizer_mod
from storekit.pipeline.encode import Encoder
from storekit.pipeline.tokenizer import TokenizerInfo, load_tokenizer, resolve_tokenizer
from tests.unit.pipeline import tokfiles
from tests.unit.pipeline.test_fast_engine import HARD_CASES, code_texts, tokenizer_doc

UNSURE = "an unassigned code point \u0378 and a noncharacter \uffff next to <EOT>"
REAL_TOKENIZER = tokenizers.Tokenizer


class CountingTokenizer:
    """Stands for `tokenizers.Tokenizer` in storekit's lazy imports: counts every load."""

    made = 0

    @staticmethod
    def from_str(text: str) -> Any:
        CountingTokenizer.made += 1
        return REAL_TOKENIZER.from_str(text)


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STOREKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(engines, "_COMPILED", {})
    monkeypatch.setattr(tokenizer_mod, "_LOADED", {})
    monkeypatch.setattr(fastbpe, "_proven", lambda key: True)  # the whole-token check: test_fast_engine
    return tmp_path


def _like_a_new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing compiled or loaded in this process any more; every Tokenizer made from now is counted."""
    monkeypatch.setattr(engines, "_COMPILED", {})
    monkeypatch.setattr(tokenizer_mod, "_LOADED", {})
    monkeypatch.setattr(fastbpe, "_CORES", {})
    monkeypatch.setattr(tokenizers, "Tokenizer", CountingTokenizer)
    CountingTokenizer.made = 0


def _planned(tmp_path: Path, name: str) -> TokenizerInfo:
    path = tokfiles.write(tokenizer_doc(name), tmp_path / f"{name}.json")
    info = resolve_tokenizer(str(path), eos=True, bos=False)
    assert isinstance(engines.compiled_for(info), fastbpe.Compiled)  # as planning does: fills the cache
    return replace(info, engine="tiktoken")


@pytest.mark.parametrize(
    ("name", "special_as_text"),
    [("bundled-65k", False), ("neox-style", False), ("neox-style", True), ("qwen2-style", False)],
)
def test_ids_without_tokenizers_are_those_with_it(
    name: str, special_as_text: bool, fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = _planned(fresh, name)
    texts = HARD_CASES + code_texts()[:10]
    # the reference: the hf engine's Encoder, and the fast one built as before, with `tokenizers` loaded
    hf_encoder = Encoder(replace(info, engine="hf"), special_as_text=special_as_text)
    with_hf = engines.fast_encoder(info, special_as_text=special_as_text)
    with_hf.load_hf()
    sure = [t for t in texts if not _unsure(with_hf, t)]
    assert len(sure) >= len(texts) - 4  # most of them, the added-token cases included
    assert any("<|pad|>" in t for t in sure) and any("<EOT>" in t for t in sure)
    expected, expected_lengths = hf_encoder.encode_batch(sure)

    _like_a_new_process(monkeypatch)
    encoder = Encoder(info, special_as_text=special_as_text)
    got, lengths = encoder.encode_batch(sure)
    assert CountingTokenizer.made == 0 and encoder.tokenizer is None
    assert np.array_equal(got, expected) and lengths == expected_lengths
    assert encoder.special_strings == hf_encoder.special_strings > 0
    assert encoder.fast is not None and encoder.fast.compiled.added == with_hf.compiled.added

    # the first unsure document loads `tokenizers` (once, however many follow), with its ids
    got, _ = encoder.encode_batch([UNSURE, UNSURE + " again"])
    expected, _ = hf_encoder.encode_batch([UNSURE, UNSURE + " again"])
    assert np.array_equal(got, expected)
    assert encoder.hf_documents == 2
    assert CountingTokenizer.made == (2 if special_as_text else 1)  # the special-as-text copy is a 2nd


def _unsure(fast: fastbpe.FastBPE, text: str) -> bool:
    before = fast.hf_documents
    fast.encode(text)
    return fast.hf_documents > before


def test_added_tokens_come_from_the_entry_only_for_the_same_tokenizers(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = _planned(fresh, "neox-style")
    entry = fastbpe_cache.load(info.xxh3_128)
    assert entry is not None
    hf = load_tokenizer(info)
    assert entry.added == fastbpe._added(hf)
    assert {t.normalized for t in entry.added} == {True, False}
    assert any(t.single_word for t in entry.added) and any(t.lstrip and t.rstrip for t in entry.added)
    # another `tokenizers` may read the file's added tokens differently: the entry is not used
    monkeypatch.setattr(fastbpe_cache, "tokenizers_version", lambda: "0.0.0-other")
    assert fastbpe_cache.load(info.xxh3_128) is None
    _like_a_new_process(monkeypatch)
    compiled = engines.compiled_for(info)
    assert isinstance(compiled, fastbpe.Compiled) and compiled.added == entry.added
    assert CountingTokenizer.made == 1  # compiled again, from the loaded tokenizer


def test_a_tokenizer_changed_before_the_lazy_load_is_refused(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = _planned(fresh, "bundled-65k")
    _like_a_new_process(monkeypatch)
    encoder = Encoder(info)
    encoder.encode_batch(["plain text is encoded without it"])
    doc = tokfiles.bundled_doc()
    doc["added_tokens"][0]["content"] = "<EOT-changed>"
    tokfiles.write(doc, Path(info.file))
    with pytest.raises(MismatchError, match="changed since it was planned"):
        encoder.encode_batch([UNSURE])
    assert CountingTokenizer.made == 0
