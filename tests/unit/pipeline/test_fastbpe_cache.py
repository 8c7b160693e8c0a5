"""Compiled ranks come from the user's private cache on the second run, and only from a sound entry."""

from __future__ import annotations

import json
import marshal
import os
from pathlib import Path
from typing import Any

import pytest
import xxhash

from storekit.pipeline import engines, fastbpe, fastbpe_cache
from storekit.pipeline.fastbpe import NotCompilable
from storekit.pipeline.tokenizer import TokenizerInfo, load_tokenizer, resolve_tokenizer
from tests.unit.pipeline import tokfiles

TEXT = "Cached ranks, the same ids: naïve café ﬁx ① 1234567 <EOT> end.\n\n  x"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("STOREKIT_CACHE_DIR", str(root))
    monkeypatch.setattr(engines, "_COMPILED", {})
    # the whole-token check (seconds, tested in test_fast_engine) is not what these tests are about
    monkeypatch.setattr(fastbpe, "_proven", lambda key: True)
    return root / "fastbpe"


def _info(tmp_path: Path, doc: dict[str, Any] | None = None) -> TokenizerInfo:
    path = tokfiles.write(doc or tokfiles.neox_style(), tmp_path / "tok.json")
    return resolve_tokenizer(str(path), eos=False, bos=False)


def _refuse_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("compiled again instead of using the cache")

    monkeypatch.setattr(fastbpe, "compile_fast", boom)


def test_second_compile_comes_from_the_cache_with_the_same_ids(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = _info(tmp_path)
    first = engines.compiled_for(info)
    assert isinstance(first, fastbpe.Compiled)
    (entry,) = cache.glob("compiled-*.bin")
    assert entry.name.endswith(f"-{info.xxh3_128}.bin")
    assert entry.stat().st_mode & 0o777 == 0o600 and cache.stat().st_mode & 0o777 == 0o700
    assert not [p for p in cache.iterdir() if "tmp" in p.name]

    engines._COMPILED.clear()
    _refuse_compiling(monkeypatch)
    second = engines.compiled_for(info)
    assert isinstance(second, fastbpe.Compiled)
    assert second.ranks == first.ranks and second.added == first.added
    assert (second.pattern, second.normalizers, second.ignore_merges) == (
        first.pattern,
        first.normalizers,
        first.ignore_merges,
    )
    hf = load_tokenizer(info)
    cached = fastbpe.FastBPE(second, lambda: hf, special_as_text=False)
    assert cached.encode(TEXT) == hf.encode(TEXT, add_special_tokens=False).ids
    # a changed compiler (fastbpe.py edited) has a new digest and never reads this entry
    monkeypatch.setattr(fastbpe_cache, "compiler_digest", lambda: "0123456789abcdef")
    assert fastbpe_cache.load(info.xxh3_128) is None


def test_a_damaged_entry_is_compiled_again_not_trusted(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = _info(tmp_path)
    good = engines.compiled_for(info)
    assert isinstance(good, fastbpe.Compiled)
    (entry,) = cache.glob("compiled-*.bin")
    data = entry.read_bytes()
    head, _, payload = data.partition(b"\n")
    # two ranks swapped: a well-formed payload, but not the one the header's digest is of
    ranks = marshal.loads(payload)
    (a, i), (b, j) = list(ranks.items())[:2]
    entry.write_bytes(head + b"\n" + marshal.dumps({**ranks, a: j, b: i}))
    assert fastbpe_cache.load(info.xxh3_128) is None
    entry.write_bytes(data[: len(data) // 2])  # cut short
    assert fastbpe_cache.load(info.xxh3_128) is None
    # a sound digest of something that is not ranks, or ranks another Python's marshal wrote
    meta = json.loads(head)
    wrong: list[tuple[dict[str, str], Any]] = [
        ({}, [1, 2]),
        ({}, {k.hex(): v for k, v in ranks.items()}),
        ({}, {k: float(v) for k, v in ranks.items()}),
        ({}, dict(list(ranks.items())[:-1])),
        ({"python": "cpython-0"}, ranks),
    ]
    for change, body in wrong:
        payload = marshal.dumps(body)
        meta.update(change, payload_xxh3=xxhash.xxh3_128_hexdigest(payload))
        entry.write_bytes(json.dumps(meta).encode() + b"\n" + payload)
        assert fastbpe_cache.load(info.xxh3_128) is None

    engines._COMPILED.clear()
    again = engines.compiled_for(info)
    assert isinstance(again, fastbpe.Compiled) and again.ranks == good.ranks
    loaded = fastbpe_cache.load(info.xxh3_128)  # the fresh compile replaced the damaged entry
    assert loaded is not None and loaded.ranks == good.ranks


def test_a_cache_others_can_write_is_neither_read_nor_written(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = _info(tmp_path)
    assert isinstance(engines.compiled_for(info), fastbpe.Compiled)
    (entry,) = cache.glob("compiled-*.bin")
    os.chmod(cache, 0o777)
    assert fastbpe_cache.load(info.xxh3_128) is None
    entry.unlink()
    fastbpe_cache.store(info.xxh3_128, fastbpe.Compiled("p", "gpt2", {b"a": 0}, (), (), True))
    assert not list(cache.iterdir())


def test_a_file_changed_after_planning_is_not_compiled_under_the_old_key(cache: Path, tmp_path: Path) -> None:
    info = _info(tmp_path)
    doc = tokfiles.neox_style()
    doc["model"]["merges"] = doc["model"]["merges"][:-1]
    tokfiles.write(doc, Path(info.file))
    why = engines.compiled_for(info)
    assert isinstance(why, str) and "changed while storekit was reading it" in why
    assert not list(cache.glob("compiled-*.bin"))


def test_rank_of_a_symbol_outside_the_byte_alphabet_is_refused() -> None:
    doc = tokfiles.bundled_doc()
    vocab = doc["model"]["vocab"]
    top = max(vocab.values())
    vocab[" "], vocab["a "] = top + 1, top + 2  # a raw space is not a byte-level symbol (that is Ġ)
    doc["model"]["merges"].append(["a", " "])
    with pytest.raises(NotCompilable, match="'a ' is not made of byte-level symbols"):
        fastbpe._model_ranks(doc)


def test_the_tokenizers_version_in_the_key_is_read_without_importing_it() -> None:
    """A Slurm element that finds its tokenizer compiled never imports `tokenizers` (~15 ms): the
    version in the cache key comes from its dist-info, and is the one the package reports."""
    import subprocess
    import sys

    import tokenizers

    code = (
        "import sys; from storekit.pipeline.fastbpe_cache import tokenizers_version as v; "
        "print(v(), 'tokenizers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [tokenizers.__version__, "False"]
