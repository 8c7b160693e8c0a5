"""Symbolic links inside an input directory or glob: followed only while they stay inside the input.

A link out (`notes.jsonl -> /etc/shadow`, or a linked directory) is refused with one line naming the
link, before anything is written: run by root on a user's directory it would copy a file the user
cannot read into shards others can. A file named on its own is read even if it is a link.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from storekit.errors import InputError
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.sources import discover_sources
from tests.conftest import run_cli
from tests.unit.pipeline.helpers import TOKENIZER, write_jsonl

SECRET = "root:$6$SHADOW-HASH-LINE"


def discover(*inputs: str, forced: str = "auto") -> list[str]:
    found = discover_sources(list(inputs), forced_format=forced, text_key="text", fs=InputFS(None))
    return [s.url for s in found]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    write_jsonl(outside / "shadow.jsonl", [{"text": SECRET}])
    root = tmp_path / "user" / "corpus"
    write_jsonl(root / "a.jsonl", [{"text": "hello world"}])
    write_jsonl(root / "sub" / "b.jsonl", [{"text": "more text"}])
    return root


def test_a_link_to_a_file_outside_the_input_directory_is_refused(corpus: Path) -> None:
    (corpus / "notes.jsonl").symlink_to(corpus.parent.parent / "outside" / "shadow.jsonl")
    for pattern in (str(corpus), f"{corpus}/*.jsonl", f"{corpus}/**/*.jsonl"):
        with pytest.raises(InputError, match=r"notes\.jsonl is a symbolic link to .*outside") as err:
            discover(pattern)
        assert "--input" in (err.value.hint or "")


def test_a_linked_directory_outside_the_input_is_refused(corpus: Path) -> None:
    (corpus / "more").symlink_to(corpus.parent.parent / "outside", target_is_directory=True)
    with pytest.raises(InputError, match="more is a symbolic link"):
        discover(str(corpus))
    with pytest.raises(InputError, match=r"shadow\.jsonl is a symbolic link"):
        discover(f"{corpus}/**/*.jsonl")  # glob's ** walks into linked directories: caught per file


def test_links_inside_the_input_and_a_named_link_are_read(corpus: Path, tmp_path: Path) -> None:
    (corpus / "alias.jsonl").symlink_to(corpus / "sub" / "b.jsonl")
    (corpus / "again").symlink_to(corpus / "sub", target_is_directory=True)  # not walked twice
    assert discover(str(corpus)) == [str(corpus / n) for n in ("a.jsonl", "alias.jsonl", "sub/b.jsonl")]
    named = tmp_path / "named.jsonl"
    named.symlink_to(tmp_path / "outside" / "shadow.jsonl")
    assert discover(str(named)) == [str(named)]  # the user named it: followed


def test_a_broken_link_is_one_line_not_a_traceback(corpus: Path) -> None:
    (corpus / "gone.jsonl").symlink_to(corpus / "nowhere.jsonl")
    with pytest.raises(InputError, match=r"gone\.jsonl is a broken symbolic link"):
        discover(str(corpus))


def test_a_save_to_disk_state_naming_a_file_outside_its_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    folder.mkdir()
    (tmp_path / "evil.arrow").write_bytes(b"x")
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": "../evil.arrow"}]}))
    with pytest.raises(InputError, match="not a file name in it"):
        discover(str(folder))
    (folder / "data.arrow").symlink_to(tmp_path / "evil.arrow")
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data.arrow"}]}))
    with pytest.raises(InputError, match=r"data\.arrow is a symbolic link"):
        discover(str(folder))


def test_prepare_refuses_before_writing_and_never_copies_the_target(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (corpus / "notes.jsonl").symlink_to(tmp_path / "outside" / "shadow.jsonl")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STOREKIT_CONFIG", raising=False)
    res = run_cli(
        ["prepare", "dataset", "-i", str(corpus), "--tokenizer", TOKENIZER, "--name", "c", "--json"], capsys
    )
    assert res.code == 1, res.stderr
    assert "notes.jsonl is a symbolic link" in res.json()["error"]["message"]
    written = (
        [p for p in (tmp_path / "storage").rglob("*") if p.is_file()]
        if (tmp_path / "storage").exists()
        else []
    )
    assert not any(SECRET.encode() in p.read_bytes() for p in written)
    assert not (tmp_path / "storage" / "datasets" / "text" / "c").exists()
    os.unlink(corpus / "notes.jsonl")
    ok = run_cli(
        ["prepare", "dataset", "-i", str(corpus), "--tokenizer", TOKENIZER, "--name", "c", "--json"], capsys
    )
    assert ok.code == 0, ok.stderr


def test_a_glob_reads_hidden_names_only_where_it_spells_their_dot(corpus: Path) -> None:
    write_jsonl(corpus / ".cache" / "x.jsonl", [{"text": "cached"}])
    write_jsonl(corpus / ".y.jsonl", [{"text": "dotted"}])
    assert discover(f"{corpus}/.cache/*.jsonl") == [str(corpus / ".cache" / "x.jsonl")]
    assert discover(f"{corpus}/.*.jsonl") == [str(corpus / ".y.jsonl")]
    plain = [str(corpus / "a.jsonl"), str(corpus / "sub" / "b.jsonl")]
    assert discover(f"{corpus}/**/*.jsonl") == plain  # ** does not enter .cache, * skips .y
    assert discover(str(corpus)) == plain


def test_a_glob_matching_a_linked_directory_walks_it_where_it_is_or_refuses_it(corpus: Path) -> None:
    (corpus / "again").symlink_to(corpus / "sub", target_is_directory=True)
    assert discover(f"{corpus}/*") == [str(corpus / "a.jsonl")]  # a directory is not a file
    (corpus / "more").symlink_to(corpus.parent.parent / "outside", target_is_directory=True)
    with pytest.raises(InputError, match="more is a symbolic link"):
        discover(f"{corpus}/*")  # as a directory input refuses it: the glob cannot read past it


def test_local_inputs_are_read_through_a_store_and_named_as_given(corpus: Path, tmp_path: Path) -> None:
    from storekit.errors import NotFoundError
    from storekit.store import PosixStore

    fs = InputFS(None)
    named = tmp_path / "named.jsonl"
    named.symlink_to(tmp_path / "outside" / "shadow.jsonl")
    store, rel = fs.place(str(named))
    assert isinstance(store, PosixStore) and store.root == str(tmp_path / "outside") and rel == "shadow.jsonl"
    with fs.open(str(named)) as fh:
        assert SECRET.encode() in fh.read()  # the user named the link: read where it leads
    assert fs.info(str(named)).size == (tmp_path / "outside" / "shadow.jsonl").stat().st_size
    gone = corpus / "gone.jsonl"
    for call in (fs.open, fs.info):
        with pytest.raises(NotFoundError) as err:
            call(str(gone))
        assert err.value.message == f"input {gone} does not exist"  # not its file:// URL
