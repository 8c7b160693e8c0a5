"""What tokenizer.json can say that would make shards differ from `Tokenizer.encode` of the whole
document without either engine noticing: truncation and padding (switched off on load, in both
engines, and said in the manifest), added tokens that collide after normalisation (never compiled),
and a sample check that saw nothing (no evidence: no fast engine). Plus counts that must not depend
on how a run was split: documents left to `tokenizers` by the fast engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from storekit.pipeline import cuts, giant
from storekit.pipeline.engines import choose_engine, compiled_for
from storekit.pipeline.tokenizer import resolve_tokenizer
from tests.conftest import run_cli
from tests.unit.pipeline import tokfiles
from tests.unit.pipeline.helpers import TOKENIZER, dataset_documents, sample_records, write_jsonl

DS = Path("storage/datasets/text/s/v1")


def _prepare(capsys: Any, tok: str, out: str, *args: str) -> Any:
    return run_cli(
        [
            "prepare",
            "dataset",
            "-i",
            "in.jsonl",
            "--tokenizer",
            tok,
            "--name",
            "s",
            "--output",
            str(Path.cwd() / out),
            "--json",
            "--quiet",
            "--no-dedup",
            *args,
        ],
        capsys,
    )


def _whole(tok: Tokenizer, texts: list[str], eos: int) -> list[list[int]]:
    return [[*tok.encode(t, add_special_tokens=False).ids, eos] for t in texts]


def test_truncation_and_padding_are_switched_off_in_both_engines(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    tok = Tokenizer.from_str(json.dumps(tokfiles.bundled_doc()))
    tok.enable_truncation(16)
    tok.enable_padding(pad_id=0, pad_token="<EOT>")  # BatchLongest, pad id 0 = EOS
    path = tmp_path / "tokenizer.json"
    path.write_text(tok.to_str())
    texts = [r["text"] for r in sample_records(limit_bytes=30_000, max_doc=5_000)] + ["short"]
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    plain = Tokenizer.from_str(json.dumps(tokfiles.bundled_doc()))
    expected = _whole(plain, texts, 0)
    assert max(map(len, expected)) > 17  # truncation would show
    for engine in ("auto", "hf", "tiktoken"):
        res = _prepare(capsys, str(path), engine, "--tokenizer-engine", engine)
        assert res.code == 0, res.stderr
        assert dataset_documents(tmp_path / engine) == expected, engine
        entry = res.json()["manifest"]["tokenizer"]
        assert entry["switched_off"] == ["truncation", "padding"]
        assert entry["engine"]["name"] == ("hf" if engine == "hf" else "tiktoken")


def _colliding_doc() -> dict[str, Any]:
    doc = tokfiles.neox_style()  # NFC; "Ω" U+03A9 is a normalized added token
    doc["added_tokens"].append(
        {
            "id": max(t["id"] for t in doc["added_tokens"]) + 1,
            "content": "\u2126",  # OHM SIGN: NFC makes it U+03A9
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": True,
            "special": False,
        }
    )
    return doc


def test_added_tokens_that_collide_after_normalisation_are_never_compiled(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tokfiles.write(_colliding_doc(), tmp_path / "tokenizer.json")
    info = resolve_tokenizer(str(path), eos=True, bos=False, eos_token="<|end|>")
    why = compiled_for(info)
    assert isinstance(why, str) and "same after normalisation" in why and "'Ω'" in why
    write_jsonl(tmp_path / "in.jsonl", [{"text": r["text"]} for r in sample_records(limit_bytes=20_000)])
    res = _prepare(capsys, str(path), "auto", "--eos-token", "<|end|>")
    assert res.code == 0, res.stderr
    engine = res.json()["manifest"]["tokenizer"]["engine"]
    assert engine["name"] == "hf" and "same after normalisation" in engine["reason"]
    res = _prepare(capsys, str(path), "forced", "--eos-token", "<|end|>", "--tokenizer-engine", "tiktoken")
    assert res.code == 2 and "same after normalisation" in res.stderr


@pytest.mark.parametrize("special_as_text", [False, True])
def test_colliding_added_tokens_keep_the_lowest_id_in_every_load(
    special_as_text: bool, tmp_path: Path, monkeypatch: Any
) -> None:
    """`tokenizers` keeps either colliding id, a different one on each load (in one process too: about
    one load in three kept the other); every storekit load keeps the lowest, so no two processes or
    runs write different ids for the same text."""
    from storekit.pipeline import tokenizer as tokenizer_module

    doc = tokfiles.family_doc("llama3")  # small (loads in milliseconds), NFKC
    first = doc["model"]["vocab"].__len__() + len(doc["added_tokens"])
    for k, content in enumerate(["\u2126", "Ω"]):  # OHM SIGN: NFKC makes it U+03A9
        doc["added_tokens"].append({"id": first + k, "content": content, "single_word": False,
                                    "lstrip": False, "rstrip": False, "normalized": True,
                                    "special": False})  # fmt: skip
    path = tokfiles.write(doc, tmp_path / "tokenizer.json")
    info = resolve_tokenizer(str(path), eos=True, bos=False, eos_token="<|endoftext|>")
    group = sorted(
        i
        for i, t in Tokenizer.from_str(path.read_text()).get_added_tokens_decoder().items()
        if t.content in ("\u2126", "Ω")
    )
    assert len(group) == 2
    kept = set()
    for _ in range(40):
        monkeypatch.setattr(tokenizer_module, "_LOADED", {})
        tok = tokenizer_module.load_tokenizer(info, special_as_text=special_as_text)
        for text in ("\u2126", "Ω", "x Ω y"):
            kept |= set(tok.encode(text, add_special_tokens=False).ids) & set(group)
    assert kept == {group[0]}


def test_an_empty_sample_check_chooses_nothing() -> None:
    info = resolve_tokenizer(TOKENIZER, eos=True, bos=False)
    chosen = choose_engine("auto", info, [], special_as_text=False)
    assert chosen.engine == "hf" and "too little input" in chosen.engine_reason
    assert chosen.sample_check is not None and chosen.sample_check["documents"] == 0


def test_long_and_giant_documents_are_sampled_in_slices(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """Every document is longer than the sample used to take (2 x PIECE_CHARS): the check compares
    slices of them, giant ones included, instead of nothing."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cuts, "PIECE_CHARS", 2 << 10)
    monkeypatch.setattr(giant, "GIANT_BYTES", 40 << 10)
    monkeypatch.setattr(giant, "CHUNK_BYTES", 8 << 10)
    body = "".join(r["text"] for r in sample_records(limit_bytes=120_000, max_doc=20_000))
    texts = [body[k * 9_000 : k * 9_000 + 20_000] for k in range(10)] + [body[:60_000]]  # the last: giant
    write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    res = _prepare(capsys, TOKENIZER, "out")
    assert res.code == 0, res.stderr
    engine = res.json()["manifest"]["tokenizer"]["engine"]
    check = engine["sample_check"]
    assert check["documents"] >= 16 and check["bytes"] >= 128 << 10 and check["identical"]
    assert not check["whole_input"] and engine["name"] == "tiktoken"
    tok = Tokenizer.from_str(json.dumps(tokfiles.bundled_doc()))
    assert dataset_documents(tmp_path / "out") == _whole(tok, texts, 0)


@pytest.mark.parametrize("workers", ["1", "3"])
def test_documents_left_to_tokenizers_are_counted_once_each_and_alike_in_every_run(
    workers: str, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """A giant document with a character this Python's Unicode does not know in every piece is one
    document (not one per piece); copies in later tasks, which finalize drops, are not counted
    (a worker that ran the first copy's task skips them, another encodes them)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cuts, "PIECE_CHARS", 2 << 10)
    monkeypatch.setattr(giant, "GIANT_BYTES", 32 << 10)
    monkeypatch.setattr(giant, "CHUNK_BYTES", 8 << 10)
    unsure = "x \u0378 y. "  # U+0378 is unassigned: the fast engine hands the document to tokenizers
    big = unsure * 15_000  # over 128K characters: several pieces on any piece size
    special = "a literal <EOT> and <SOS>"  # special-token strings are counted the same way
    records = [{"text": big}, {"text": "plain"}, {"text": "one " + unsure}, {"text": special}]
    records += [{"text": f"filler {i} " * 200} for i in range(40)]
    records += [{"text": "one " + unsure}, {"text": big}, {"text": special}]  # copies: dropped at finalize
    write_jsonl(tmp_path / "in.jsonl", records)
    args = ["--tokenizer-engine", "tiktoken", "--workers", workers, "--task-size", "16KiB"]
    res = run_cli(["prepare", "dataset", "-i", "in.jsonl", "--tokenizer", TOKENIZER, "--name", "s", *args,
                   "--json", "--quiet"], capsys)  # fmt: skip
    assert res.code == 0, res.stderr
    out = res.json()
    assert out["manifest"]["stats"]["docs_duplicate"] == 3
    assert out["manifest"]["stats"]["special_token_strings"] == 2
    assert out["timings"]["engine_hf_documents"] == 2
    assert out["manifest"]["tokenizer"]["engine"]["hf_documents"] == 2
    tok = Tokenizer.from_str(json.dumps(tokfiles.bundled_doc()))
    kept = [r["text"] for r in records[:-3]]
    assert dataset_documents(tmp_path / DS) == _whole(tok, kept, 0)
