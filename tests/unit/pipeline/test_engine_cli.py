"""`prepare dataset --tokenizer-engine` and `--special-tokens` end to end: same shards from either
engine, the choice and the sample check in the manifest and --json, a forced fast engine that cannot
be used exits 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import run_cli
from tests.unit.pipeline import tokfiles
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, tree_bytes, write_jsonl

MULTILINGUAL = [
    "Привет, мир! Это тест. " * 20,
    "中文文本，日本語のテキスト、한국어 텍스트。" * 30,
    "العربية مع التشكيل: بِسْمِ اللَّهِ الرَّحْمَٰنِ " * 10,
    "combining e\u0301 ǅ ﬁ ① ™ ½ x² and a literal <EOT> that ends nothing",
    "emoji 👩🏽‍💻👨‍👩‍👧‍👦 " * 15 + "\n\n\n    \t\t" + " " * 200 + "end",
    "<SOS>literal specials<EOT><META>",
]


def _corpus(tmp_path: Path) -> Path:
    records = sample_records(limit_bytes=150_000) + [{"text": t} for t in MULTILINGUAL]
    return write_jsonl(tmp_path / "in" / "part.jsonl", records)


def _prepare(capsys: Any, tmp_path: Path, out: str, *args: str) -> Any:
    res = run_cli(
        [
            "prepare",
            "dataset",
            "-i",
            str(tmp_path / "in"),
            "--tokenizer",
            TOKENIZER,
            "--name",
            "eng",
            "--output",
            str(tmp_path / out),
            "--task-size",
            "32KiB",
            "--shard-size",
            "64KiB",
            "--json",
            "--quiet",
            *args,
        ],
        capsys,
    )
    return res


def _without_engine(tree: dict[str, bytes]) -> dict[str, bytes]:
    doc = json.loads(tree["manifest.json"])
    engine = doc["body"]["tokenizer"].pop("engine") if "body" in doc else doc["tokenizer"].pop("engine")
    assert engine["name"] in ("hf", "tiktoken")
    return {**tree, "manifest.json": json.dumps(doc, sort_keys=True).encode()}


def test_both_engines_write_the_same_dataset(tmp_path: Path, capsys: Any) -> None:
    _corpus(tmp_path)
    fast = _prepare(capsys, tmp_path, "fast", "--tokenizer-engine", "tiktoken")
    assert fast.code == 0, fast.stderr
    slow = _prepare(capsys, tmp_path, "slow", "--tokenizer-engine", "hf")
    assert slow.code == 0, slow.stderr
    auto = _prepare(capsys, tmp_path, "auto")
    assert auto.code == 0, auto.stderr
    trees = [tree_bytes(tmp_path / name) for name in ("fast", "slow", "auto")]
    assert _without_engine(trees[0]) == _without_engine(trees[1]) == _without_engine(trees[2])
    assert trees[0]["manifest.json"] != trees[1]["manifest.json"]  # the engine field differs, only it

    engine = fast.json()["manifest"]["tokenizer"]["engine"]
    assert engine["name"] == "tiktoken"
    check = engine["sample_check"]
    assert check["identical"] and check["documents"] > 10 and check["first_difference"] is None
    assert auto.json()["manifest"]["tokenizer"]["engine"]["name"] == "tiktoken"
    assert auto.json()["plan"]["tokenizer_engine"]["name"] == "tiktoken"
    assert slow.json()["manifest"]["tokenizer"]["engine"] == {
        "name": "hf",
        "reason": "asked for (--tokenizer-engine hf)",
        "sample_check": None,
        "hf_documents": 0,  # documents the fast engine left to tokenizers: none without it
    }
    assert fast.json()["timings"]["engine"] == "tiktoken"
    stats = fast.json()["manifest"]["stats"]
    assert stats["special_token_strings"] == 4  # <EOT> in one document, then <SOS>, <EOT>, <META>
    assert slow.json()["manifest"]["stats"]["special_token_strings"] == 4


def test_special_tokens_as_text(tmp_path: Path, capsys: Any) -> None:
    _corpus(tmp_path)
    match = _prepare(capsys, tmp_path, "match")
    assert match.code == 0, match.stderr
    text = _prepare(capsys, tmp_path, "text", "--special-tokens", "text")
    assert text.code == 0, text.stderr
    text_hf = _prepare(capsys, tmp_path, "text-hf", "--special-tokens", "text", "--tokenizer-engine", "hf")
    assert text_hf.code == 0, text_hf.stderr
    assert _without_engine(tree_bytes(tmp_path / "text")) == _without_engine(tree_bytes(tmp_path / "text-hf"))
    m, t = match.json()["manifest"], text.json()["manifest"]
    assert m["options"]["special_tokens"] == "match" and t["options"]["special_tokens"] == "text"
    assert m["plan_id"] != t["plan_id"]
    assert m["stats"]["special_token_strings"] == t["stats"]["special_token_strings"] == 4
    assert t["stats"]["tokens"] > m["stats"]["tokens"]  # each literal became several text tokens


def test_forced_fast_engine_that_cannot_be_used_exits_2(tmp_path: Path, capsys: Any) -> None:
    _corpus(tmp_path)
    tok = tokfiles.write(tokfiles.with_dropout(), tmp_path / "dropout.json")
    res = run_cli(
        [
            "prepare",
            "dataset",
            "-i",
            str(tmp_path / "in"),
            "--tokenizer",
            str(tok),
            "--name",
            "x",
            "--output",
            str(tmp_path / "x"),
            "--tokenizer-engine",
            "tiktoken",
        ],
        capsys,
    )
    assert res.code == 2
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert lines[0].startswith(
        "error: --tokenizer-engine tiktoken: the tokenizer cannot be compiled exactly: BPE dropout"
    )
    assert not (tmp_path / "x").exists()
    auto = run_cli(
        [
            "prepare",
            "dataset",
            "-i",
            str(tmp_path / "in"),
            "--tokenizer",
            str(tok),
            "--name",
            "x",
            "--output",
            str(tmp_path / "x"),
            "--json",
            "--quiet",
            "--dry-run",
        ],
        capsys,
    )
    assert auto.code == 0, auto.stderr
    engine = auto.json()["plan"]["tokenizer_engine"]
    assert engine["name"] == "hf" and "BPE dropout" in engine["reason"]


def test_pipeline_key_and_bad_value(tmp_path: Path, capsys: Any) -> None:
    _corpus(tmp_path)
    pipe = tmp_path / "p.toml"
    pipe.write_text(
        f'[input]\npaths = ["{tmp_path / "in"}"]\n[tokenizer]\npath = "{TOKENIZER}"\nengine = "hf"\n'
        f'special_tokens = "text"\n[output]\npath = "{tmp_path / "p"}"\n'
    )
    res = run_cli(["prepare", "dataset", str(pipe), "--json", "--quiet", "--dry-run"], capsys)
    assert res.code == 0, res.stderr
    plan = res.json()["plan"]
    assert plan["tokenizer_engine"]["name"] == "hf" and plan["options"]["special_tokens"] == "text"
    bad = run_cli(["prepare", "dataset", str(pipe), "--tokenizer-engine", "fast", "--dry-run"], capsys)
    assert bad.code == 2 and "--tokenizer-engine" in bad.stderr and "auto, hf, tiktoken" in bad.stderr


def test_fast_engine_workers_are_processes_with_the_same_shards(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.delenv("STOREKIT_THREADS_PER_PROCESS", raising=False)
    _corpus(tmp_path)
    one = _prepare(capsys, tmp_path, "one", "--workers", "1", "--tokenizer-engine", "tiktoken")
    two = _prepare(capsys, tmp_path, "two", "--workers", "2", "--tokenizer-engine", "tiktoken")
    hf = _prepare(capsys, tmp_path, "hf", "--workers", "2", "--tokenizer-engine", "hf")
    assert one.code == two.code == hf.code == 0, (one.stderr, two.stderr, hf.stderr)
    assert one.json()["timings"]["worker_processes"] == 0  # one worker: the calling process
    assert two.json()["timings"]["worker_processes"] == 2  # the GIL-heavy fast engine: one thread each
    assert hf.json()["timings"]["worker_processes"] == 0  # `tokenizers`: two threads of one process
    trees = [tree_bytes(tmp_path / name) for name in ("one", "two", "hf")]
    assert trees[0] == trees[1]
    assert _without_engine(trees[1]) == _without_engine(trees[2])
