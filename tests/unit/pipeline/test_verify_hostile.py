"""Issue #33 items 5 and 4: `dataset verify` checks the manifest against its schema and the files on
disk against the manifest both ways; a shard, an index or the manifest that is a FIFO, a directory or
a link is a mismatch (exit 4) named on one line, never a hang or a traceback."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl

DS = Path("storage/datasets/text/cn/v1")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One dataset with 2+ train shards and a holdout shard, prepared once for the module."""
    base = tmp_path_factory.mktemp("prepared")
    write_jsonl(base / "corpus.jsonl", sample_records(limit_bytes=24_000, max_doc=4_000))
    args = ["prepare", "dataset", "--tokenizer", TOKENIZER, "--name", "cn", "-i", "corpus.jsonl"]
    args += ["--quiet", "--workers", "1", "--shard-size", "8KiB", "--task-size", "8KiB", "--holdout", "0.2"]
    cwd = os.getcwd()
    os.chdir(base)
    try:
        assert run_cli(args).code == 0
    finally:
        os.chdir(cwd)
    return base


@pytest.fixture
def ds(prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> Path:
    shutil.copytree(prepared / "storage", tmp_path / "storage", symlinks=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STOREKIT_CONFIG", raising=False)
    assert verify(capsys).json()["shards_checked"] == 3  # the copy verifies before it is doctored
    return tmp_path / DS


def edit(ds: Path, change: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads((ds / "manifest.json").read_bytes())
    change(doc)
    (ds / "manifest.json").write_text(json.dumps(doc))


def verify(capsys: Any) -> Any:
    return run_cli(["dataset", "verify", str(DS.relative_to("storage")), "--json"], capsys)


def error_of(res: Any) -> str:
    assert res.code == 4, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    return str(res.json()["error"]["message"])


def _drop_first_train(doc: dict[str, Any]) -> None:
    doc["shards"] = [s for s in doc["shards"] if s["name"] != "train-00000"]


def _drop_and_fix_totals(doc: dict[str, Any]) -> None:
    gone = next(s for s in doc["shards"] if s["name"] == "train-00000")
    _drop_first_train(doc)
    split = doc["splits"]["train"]
    split["shards"] -= 1
    split["documents"] -= gone["documents"]
    split["tokens"] -= gone["tokens"]
    doc["stats"]["tokens"] -= gone["tokens"]


def _drop_everywhere(doc: dict[str, Any]) -> None:
    _drop_and_fix_totals(doc)
    doc["files"] = [f for f in doc["files"] if not f["path"].startswith("train-00000.")]


CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("one-shard-dropped", _drop_first_train, "splits.train.shards is 2, shards[] add up to 1"),
    ("dropped-totals-fixed", _drop_and_fix_totals, "files[] lists train-00000.bin, which no shards[]"),
    ("no-shards", lambda d: d.pop("shards"), "no shards list"),
    ("empty-shards", lambda d: d.update(shards=[]), "splits.train.shards is 2, shards[] add up to 0"),
    ("split-tokens", lambda d: d["splits"]["holdout"].update(tokens=1), "splits.holdout.tokens is 1"),
    ("schema-99", lambda d: d.update(schema_version=99), "schema_version 99 is not one this storekit"),
]


@pytest.mark.parametrize(("change", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_manifest_that_disagrees_with_itself_is_a_mismatch(
    ds: Path, capsys: Any, change: Callable[[dict[str, Any]], None], expected: str
) -> None:
    edit(ds, change)
    assert expected in error_of(verify(capsys))


def test_a_shard_dropped_from_every_list_is_found_on_disk(ds: Path, capsys: Any) -> None:
    edit(ds, _drop_everywhere)
    res = verify(capsys)
    assert res.code == 4, res.stdout
    problems = {(p["path"], p["problem"]) for p in res.json()["problems"]}
    assert ("train-00000.bin", "in the dataset but not listed in the manifest") in problems
    assert ("train-00000.idx", "in the dataset but not listed in the manifest") in problems


def test_a_deeply_nested_manifest_is_one_line_not_a_traceback(ds: Path, capsys: Any) -> None:
    doc = json.loads((ds / "manifest.json").read_bytes())
    text = json.dumps(doc)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (ds / "manifest.json").write_text(text)
    assert "nested deeper than 64 levels" in error_of(verify(capsys))


@pytest.mark.parametrize("name", ["train-00001.bin", "train-00001.idx", "manifest.json"])
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_fifo_or_directory_in_place_of_a_file_is_a_mismatch_not_a_hang(
    ds: Path, capsys: Any, name: str, kind: str
) -> None:
    (ds / name).unlink()
    if kind == "fifo":
        os.mkfifo(ds / name)  # with nobody writing: open() for reading would block forever
    else:
        (ds / name).mkdir()
    res = verify(capsys)
    assert res.code == 4, (res.stdout, res.stderr)
    doc = res.json()
    what = "a FIFO" if kind == "fifo" else "a directory"
    if name == "manifest.json":
        assert f"not a regular file ({what})" in doc["error"]["message"]
    else:
        problems = [p for p in doc["problems"] if p["path"] == name]
        assert any(f"not a regular file ({what})" in p["problem"] for p in problems), doc


def test_a_shard_linked_inside_the_tier_is_a_mismatch(ds: Path, capsys: Any) -> None:
    target = ds.parent / "elsewhere.bin"
    (ds / "train-00001.bin").rename(target)
    (ds / "train-00001.bin").symlink_to(target)  # same bytes, but not the dataset's own file
    res = verify(capsys)
    assert res.code == 4, res.stdout
    assert {"path": "train-00001.bin", "problem": "a symbolic link; a dataset holds regular files only"} in (
        res.json()["problems"]
    )


@pytest.mark.parametrize("change", [_drop_first_train, _drop_and_fix_totals], ids=["dropped", "totals-fixed"])
@pytest.mark.parametrize("command", ["info", "blend"])
def test_info_and_blend_refuse_a_manifest_that_drops_a_shard(
    ds: Path, capsys: Any, change: Callable[[dict[str, Any]], None], command: str
) -> None:
    """`dataset blend` emitted 3 of 4 train shards for such a manifest and `dataset info` showed it
    as sound: both read it through the same checks as verify (exit 4), and print no data arguments."""
    edit(ds, change)
    res = run_cli(["dataset", command, str(DS.relative_to("storage")), "--json"], capsys)
    message = error_of(res)
    assert "train-00000" in message or "splits.train.shards is 2, shards[] add up to 1" in message
    assert set(res.json()) <= {"schema_version", "error", "config"}, res.stdout  # no prefixes, no summary
