"""What a plan reads from tokenizer.json without loading it into `tokenizers` is what the library says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, models

from storekit.errors import InputError
from storekit.pipeline import tokenizer as tok
from storekit.pipeline.tokenizer import load_tokenizer, resolve_tokenizer
from tests.unit.pipeline import tokfiles
from tests.unit.pipeline.helpers import REPO, TOKENIZER

TEXTS = ["hello world", "the quick brown fox jumps over the lazy dog"] * 40


def _with_added(doc: dict[str, Any], special: list[str], plain: list[str]) -> dict[str, Any]:
    lib = Tokenizer.from_str(json.dumps(doc))
    lib.add_special_tokens(special)
    lib.add_tokens(plain)
    out: dict[str, Any] = json.loads(lib.to_str())
    return out


def _word_level() -> dict[str, Any]:
    lib = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    lib.add_special_tokens(["<eos>", "a"])  # "a" is in the model's vocabulary: it keeps id 0
    lib.add_tokens(["zz"])
    out: dict[str, Any] = json.loads(lib.to_str())
    return out


LAYOUTS = {
    # read from the file: BPE (the bundled one; with special and plain tokens added after its
    # vocabulary, as Llama 3's are), WordPiece, Unigram, WordLevel with an added token it already has
    "bpe": (tokfiles.bundled_doc, "<EOT>", True),
    "bpe-added": (
        lambda: _with_added(tokfiles.bundled_doc(), ["<|endoftext|>", "<new>"], ["Ġthe"]),
        "<new>",
        True,
    ),
    "wordpiece": (lambda: tokfiles.trained("wordpiece", TEXTS), "[SEP]", True),
    "unigram": (lambda: tokfiles.trained("unigram", TEXTS), "</s>", True),
    "wordlevel": (_word_level, "<eos>", True),
    # added tokens whose ids the library replaces (the file says 0-4, the library 24000-24004; a
    # token of the model's vocabulary keeps the model's id): left to the library
    "tekken": (lambda: tokfiles.tekken_style("tekken"), "</s>", False),
    "neox": (tokfiles.neox_style, "<|end|>", False),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_vocabulary_size_and_special_ids_are_the_librarys(tmp_path: Path, layout: str) -> None:
    make, eos, from_file = LAYOUTS[layout]
    path = tokfiles.write(make(), tmp_path / "tokenizer.json")
    tok._LOADED.clear()
    info = resolve_tokenizer(str(path), eos=True, bos=False, eos_token=eos)
    assert (len(tok._LOADED) == 0) is from_file  # read from the file: the library not loaded yet
    library = Tokenizer.from_str(path.read_text())
    assert info.vocab_size == library.get_vocab_size(with_added_tokens=True)
    assert info.eos_id == library.token_to_id(eos) is not None
    assert info.dtype == ("uint16" if info.vocab_size < 65500 else "int32")
    assert load_tokenizer(info).token_to_id(eos) == info.eos_id  # and loading it confirms them


def test_loading_refuses_a_plan_whose_facts_the_library_contradicts(tmp_path: Path) -> None:
    path = tokfiles.write(tokfiles.bundled_doc(), tmp_path / "tokenizer.json")
    info = resolve_tokenizer(str(path), eos=True, bos=False)
    for wrong in (replace(info, vocab_size=info.vocab_size + 1), replace(info, eos_id=7)):
        tok._LOADED.clear()
        with pytest.raises(InputError, match=r"tokenizer .*tokenizer\.json: .* read from tokenizer\.json is"):
            load_tokenizer(wrong)
    tok._LOADED.clear()
    assert load_tokenizer(info).get_vocab_size(with_added_tokens=True) == 65000


def test_a_file_the_library_rejects_is_refused_when_loaded(tmp_path: Path) -> None:
    doc = tokfiles.bundled_doc()
    doc["pre_tokenizer"] = {"type": "NoSuchPreTokenizer"}  # the vocabulary reads fine, the file does not
    path = tokfiles.write(doc, tmp_path / "tokenizer.json")
    tok._LOADED.clear()
    info = resolve_tokenizer(str(path), eos=True, bos=False)
    with pytest.raises(InputError, match=r"tokenizer .*tokenizer\.json: cannot be loaded"):
        load_tokenizer(info)


def test_planning_does_not_import_tokenizers() -> None:
    code = (
        "import sys; from storekit.pipeline.tokenizer import resolve_tokenizer; "
        f"info = resolve_tokenizer({TOKENIZER!r}, eos=True, bos=False); "
        "print(info.vocab_size, info.eos_id, 'tokenizers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["65000", "0", "False"]


def test_a_plan_is_drafted_without_numpy_or_tokenizers(tmp_path: Path) -> None:
    """What a Slurm submission does before its sbatch (storekit.pipeline.submit) loads neither: the
    array is queued ~0.15 s sooner; the engine choice after it loads both."""
    corpus = tmp_path / "in" / "a.jsonl"
    corpus.parent.mkdir()
    corpus.write_text("".join(json.dumps({"text": f"document {i} " * 50}) + "\n" for i in range(200)))
    code = f"""
import sys
import storekit.cli.app, storekit.pipeline.submit
from storekit.config import load_config
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.prepare import draft_plan
from storekit.pipeline.spec import CLI_SOURCE, build_spec
spec = build_spec(CLI_SOURCE, {{"name": "x", "inputs": ({str(corpus.parent)!r},), "tokenizer": {TOKENIZER!r},
    "task_bytes": 4096, "work_dir": {str(tmp_path / "work")!r}}}, {{}})
site = load_config(None)
plan, location, work = draft_plan(spec, site, InputFS(site))
print(len(plan.tasks), plan.tokenizer.vocab_size, "numpy" in sys.modules, "tokenizers" in sys.modules)
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # run in tmp_path: the default config's ./storage
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    tasks, vocab, numpy, tokenizers = out.stdout.split()
    assert int(tasks) > 1 and vocab == "65000"
    assert (numpy, tokenizers) == ("False", "False")


def test_a_malformed_vocabulary_is_one_input_error(tmp_path: Path) -> None:
    doc = tokfiles.bundled_doc()
    doc["added_tokens"] = [{"id": 65000}]  # no content
    path = tokfiles.write(doc, tmp_path / "tokenizer.json")
    with pytest.raises(InputError, match=r"tokenizer .*tokenizer\.json: cannot be loaded \(KeyError"):
        resolve_tokenizer(str(path), eos=True, bos=False)
